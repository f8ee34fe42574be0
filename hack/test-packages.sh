#!/usr/bin/env bash
# Prints the packages of one test layer of the kobe module, for the
# Makefile's test targets. A layer beyond unit is a build tag: a test file
# that needs more than Go carries `//go:build <layer>` on its first line, so
# `go test ./...` runs the unit layer alone, as any user, with no control
# plane (docs/development.md, "Which layer a test belongs to").
#
#   integration  a real kube-apiserver and etcd (internal/testenv)
#   e2e          the operator binary, CLI and `make run` end to end
#   heavy        many real clusters at once, two operator replicas, the
#                connect proxy under load, scaling; one package at a time
#   root         the real-node host cluster (root, containerd, kubelet)
#   bench        the `make bench` harness
#
# A package is in a layer when one of its test files carries that tag.
set -euo pipefail
cd "$(dirname "$0")/.."

layer=${1:-}
case $layer in
integration | e2e | heavy | root | bench) ;;
*)
	echo "usage: $0 integration|e2e|heavy|root|bench" >&2
	exit 2
	;;
esac

module=$(go list -m)
git ls-files --cached --others --exclude-standard -- '*_test.go' |
	while read -r f; do
		# test/chart is a module of its own, with its own targets.
		case $f in test/chart/* | hack/*) continue ;; esac
		if [ -f "$f" ] && [ "$(head -n 1 "$f")" = "//go:build $layer" ]; then dirname "$f"; fi
	done | sort -u | sed "s|^|$module/|"
