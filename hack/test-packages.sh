#!/usr/bin/env bash
# Prints the packages of one test layer, for the Makefile's test targets:
#
#   unit         tests that need no control plane: their test binary does
#                not link internal/testenv
#   integration  tests that start the real control plane (internal/testenv),
#                except the heavy and end-to-end ones
#   heavy        integration packages that start many real clusters each; run
#                them one at a time (go test -p 1) on a 2-core machine
#   e2e          the real operator binary, CLI and `make run` end to end,
#                and two operator replicas (test/ha)
#   node         the real-node host cluster (needs root, containerd, kubelet:
#                `make test-node`, part of `make test`)
#
# The sets come from `go list -deps -test`, so a new package lands in the
# right layer without editing a list; only heavy and e2e are named here, and
# test/bench (the `make bench` harness) is in no layer.
set -euo pipefail
cd "$(dirname "$0")/.."

module=$(go list -m)
heavy=("$module/internal/backend/local" "$module/internal/controller/clusterpool")
e2e=("$module/test/e2e" "$module/test/ha" "$module/test/connect" "$module/test/scaling")
compgen -G "test/run/*_test.go" >/dev/null && e2e+=("$module/test/run")
bench=("$module/test/bench")
node=("$module/internal/testenv/hostcluster" "$module/internal/backend/local/nodetest" "$module/test/localnodes" "$module/internal/backend/incluster/lifecycle" "$module/test/incluster" "$module/internal/gates/realnode")

# "<pkg> <1 if its test binary links testenv>" for every package with tests.
classify() {
	go list -e -test -f '{{if eq .Name "main"}}{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{end}}' ./... |
		awk -v testenv="$module/internal/testenv" '
			$1 ~ /\.test$/ {
				uses = 0
				for (i = 2; i <= NF; i++) if ($i == testenv) uses = 1
				sub(/\.test$/, "", $1)
				print $1, uses
			}'
}

named() { # pkg, list...: whether pkg is in the list
	local p=$1
	shift
	local n
	for n in "$@"; do [ "$n" = "$p" ] && return 0; done
	return 1
}

layer=${1:-}
case $layer in
heavy) printf '%s\n' "${heavy[@]}" ;;
e2e) printf '%s\n' "${e2e[@]}" ;;
node) printf '%s\n' "${node[@]}" ;;
unit | integration)
	classify | while read -r pkg uses; do
		named "$pkg" "${heavy[@]}" "${e2e[@]}" "${bench[@]}" "${node[@]}" && continue
		if { [ "$layer" = unit ] && [ "$uses" = 0 ]; } || { [ "$layer" = integration ] && [ "$uses" = 1 ]; }; then
			echo "$pkg"
		fi
	done
	;;
*)
	echo "usage: $0 unit|integration|heavy|e2e|node" >&2
	exit 2
	;;
esac
