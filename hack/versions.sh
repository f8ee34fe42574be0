#!/usr/bin/env bash
# Prints a version pinned by a module under hack/, read from its go.mod, so
# that each version is written exactly once:
#
#   hack/versions.sh kubernetes   1.37.2   (k8s.io/kubernetes in hack/controlplane/kubernetes)
#   hack/versions.sh etcd         3.6.16   (go.etcd.io/etcd/server/v3 in hack/controlplane/etcd)
#   hack/versions.sh kwok         0.8.0    (sigs.k8s.io/kwok in hack/controlplane/kwok)
#
# The Makefile, hack/build-controlplane.sh and hack/gen-version.sh (which
# writes internal/version for the Go code) all ask this script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

case ${1:-} in
kubernetes) dir=kubernetes mod=k8s.io/kubernetes ;;
etcd) dir=etcd mod=go.etcd.io/etcd/server/v3 ;;
kwok) dir=kwok mod=sigs.k8s.io/kwok ;;
*)
	echo "usage: $0 kubernetes|etcd|kwok" >&2
	exit 2
	;;
esac

# A require is either "require mod vX" or "mod vX" inside a require block.
v=$(awk -v mod="$mod" '
	$1 == "require" && $2 == mod { print $3; exit }
	$1 == mod && $2 ~ /^v/ { print $2; exit }
' "$root/hack/controlplane/$dir/go.mod")
if [ -z "$v" ]; then
	echo "$0: no require of $mod in hack/controlplane/$dir/go.mod" >&2
	exit 1
fi
echo "${v#v}"
