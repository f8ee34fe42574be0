#!/usr/bin/env bash
# Builds the node components of the real-node host cluster (kubelet and
# kube-proxy) from hack/controlplane/kubernetes, the module that pins the
# test control plane, so node and control plane are one Kubernetes version
# and share the Go build cache (most packages are compiled already when the
# control plane is). Kept apart from hack/build-controlplane.sh so that tests
# which need no node never pay for it: about 7 min on 2 cores on top of a
# warm control-plane cache, a relink (well under a minute) after that.
#
# Output: bin/node/<k8s version>/ (NODE_DIR overrides it), git-ignored.
# A stamp keyed on this script, hack/versions.sh and the module's go.mod and
# go.sum skips the build when nothing changed.
#
# The binaries are version-stamped like the control plane's (hack/versions.sh
# ldflags): unstamped ones report v0.0.0-master+$Format:%H$, which kubectl
# and Helm's kubeVersion checks cannot parse.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mod=$root/hack/controlplane/kubernetes
k8s_version=$("$root/hack/versions.sh" kubernetes)
out=${NODE_DIR:-$root/bin/node/$k8s_version}
want=(kubelet kube-proxy)

stamp=$out/.stamp
key=$({
	echo "${want[*]}"
	cat "$0" "$root/hack/versions.sh" "$mod/go.mod" "$mod/go.sum"
} | sha256sum | cut -d' ' -f1)

complete() {
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] || return 1
	local f
	for f in "${want[@]}"; do [ -x "$out/$f" ] || return 1; done
}
if complete; then
	echo "$out"
	exit 0
fi

mkdir -p "$out"
rm -f "$stamp"
stage=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# The same version stamp as the control plane's (hack/versions.sh ldflags).
stampflags=$("$root/hack/versions.sh" ldflags)

echo "building kubelet and kube-proxy $k8s_version into $out; the first time takes several minutes" >&2
start=$SECONDS
cd "$mod"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $stampflags" -o "$stage/" \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
echo "kubelet, kube-proxy: done in $((SECONDS - start))s" >&2

for f in "${want[@]}"; do
	# A rename replaces a binary atomically: a test starting one meanwhile
	# gets the old or the new file, never half of one.
	mv -f "$stage/$f" "$out/$f"
done
echo "$key" >"$stamp"
echo "$out"
