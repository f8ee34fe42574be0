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
#   soak         the `make soak` chaos soak (run by its own target only)
#
# A package is in a layer when one of its test files carries that tag.
# With --tests it prints the layer's test names instead (for go test -run).
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
if [ "${1:-}" = --tests ]; then
	tests=1
	shift
fi
layer=${1:-}
case $layer in
integration | e2e | heavy | root | bench | soak) ;;
*)
	echo "usage: $0 [--tests] integration|e2e|heavy|root|bench|soak" >&2
	exit 2
	;;
esac

# layer_files lists the test files of the kobe module whose build line is
# the layer's tag alone or, with --tests, ends in "&& <layer>" (test/e2e's
# slow failure paths are "e2e && heavy").
layer_files() {
	git ls-files --cached --others --exclude-standard -- '*_test.go' |
		while read -r f; do
			# test/chart is a module of its own, with its own targets.
			case $f in test/chart/* | hack/*) continue ;; esac
			[ -f "$f" ] || continue
			line=$(head -n 1 "$f")
			if [ "$line" = "//go:build $layer" ] || { [ $tests = 1 ] && [ "${line% && $layer}" != "$line" ]; }; then
				echo "$f"
			fi
		done
}

if [ $tests = 1 ]; then
	# --tests: the names of the layer's Test functions, joined by | for
	# go test -run "^(...)$".
	layer_files | xargs -r grep -h '^func Test' | sed 's/^func \(Test[A-Za-z0-9_]*\).*/\1/' |
		grep -vx TestMain | sort -u | paste -sd'|'
	exit 0
fi

module=$(go list -m)
layer_files | xargs -r -n1 dirname | sort -u | sed "s|^|$module/|"
