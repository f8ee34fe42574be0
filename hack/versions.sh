#!/usr/bin/env bash
# Prints a version pinned by a module under hack/, read from its go.mod, so
# that each version is written exactly once:
#
#   hack/versions.sh kubernetes   1.37.2   (k8s.io/kubernetes in hack/controlplane/kubernetes)
#   hack/versions.sh etcd         3.6.16   (go.etcd.io/etcd/server/v3 in hack/controlplane/etcd)
#   hack/versions.sh kwok         0.8.0    (sigs.k8s.io/kwok in hack/controlplane/kwok)
#   hack/versions.sh coredns      1.15.0   (github.com/coredns/coredns in images/coredns)
#
#   hack/versions.sh ldflags      -X flags that stamp a Kubernetes binary
#   hack/versions.sh ldflags V D  the same for version V built from the module in D
#
# The Makefile, hack/build-controlplane.sh and hack/gen-version.sh (which
# writes internal/version for the Go code) all ask this script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# ldflags prints the -X flags that make a binary built from
# hack/controlplane/kubernetes report its release (kube-apiserver --version,
# kubectl version, the API server's /version) instead of
# v0.0.0-master+$Format:%H$, which kubectl and Helm's kubeVersion cannot
# parse. Both version packages are stamped: component-base's (servers) and
# client-go's (the user agent and what clients report). The build date is the
# release's time as the module proxy gives it, so a rebuild gives the same
# binary; gitCommit is left empty, since the module does not say which
# upstream commit it is (an empty commit beats the placeholder).
ldflags() { # [version module-dir]: the default is hack/controlplane/kubernetes's
	local v major minor date pkg moddir
	v=${1:-$("$0" kubernetes)}
	moddir=${2:-$root/hack/controlplane/kubernetes}
	major=${v%%.*}
	minor=${v#*.}
	minor=${minor%%.*}
	date=$(cd "$moddir" &&
		go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		printf -- '-X %s ' "$pkg.gitVersion=v$v" "$pkg.gitMajor=$major" "$pkg.gitMinor=$minor" \
			"$pkg.gitTreeState=clean" "$pkg.gitCommit=" "$pkg.buildDate=${date:-1970-01-01T00:00:00Z}"
	done
	echo
}

case ${1:-} in
ldflags)
	shift
	ldflags "$@"
	exit
	;;
kubernetes) dir=hack/controlplane/kubernetes mod=k8s.io/kubernetes ;;
etcd) dir=hack/controlplane/etcd mod=go.etcd.io/etcd/server/v3 ;;
kwok) dir=hack/controlplane/kwok mod=sigs.k8s.io/kwok ;;
coredns) dir=images/coredns mod=github.com/coredns/coredns ;;
*)
	echo "usage: $0 kubernetes|etcd|kwok|coredns|ldflags" >&2
	exit 2
	;;
esac

# A require is either "require mod vX" or "mod vX" inside a require block.
v=$(awk -v mod="$mod" '
	$1 == "require" && $2 == mod { print $3; exit }
	$1 == mod && $2 ~ /^v/ { print $2; exit }
' "$root/$dir/go.mod")
if [ -z "$v" ]; then
	echo "$0: no require of $mod in $dir/go.mod" >&2
	exit 1
fi
echo "${v#v}"
