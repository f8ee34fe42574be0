#!/usr/bin/env bash
# Checks that kobe's images are reproducible: builds one in two fresh clones
# of one commit and fails unless both tarballs, and so both digests, are
# identical. Prints each build's time and the digests.
#
#   hack/image-reproducible.sh [commit]         the kobe-operator image (`make image-reproducible`)
#   hack/image-reproducible.sh --node [commit]  the node pods' image (`make image-node-reproducible`, root)
#
# The operator image is built with an empty Go build cache in each clone (the
# module download cache is shared: it holds sources, not build results), so
# the Go toolchain's own reproducibility is part of the check. The node image
# is built with the caller's Go build cache: what is new in it is the
# assembly (Debian's containerd, runc, CNI plugins, iptables and busybox with
# their libraries, kubelet and kube-proxy, the pause and CoreDNS archives,
# one layer packed by kobe-image), and compiling a whole Kubernetes twice
# from nothing would prove again what the operator image proves. Each clone
# still builds its own kubelet, kube-proxy and control plane into its own
# bin/ (linked again, from the shared cache).
#
# Slow: not part of `make test` (docs/images.md has the figures).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=image out=kobe-operator.tar cache=empty
if [ "${1:-}" = --node ]; then
	target=image-node out=kobe-node.tar cache=shared
	shift
fi
commit=$(git -C "$root" rev-parse "${1:-HEAD}")
work=$(mktemp -d "${TMPDIR:-/tmp}/kobe-image-repro.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

for i in 1 2; do
	git clone -q --no-checkout "$root" "$work/clone$i"
	git -C "$work/clone$i" checkout -q "$commit"
done
# Side by side: on two cores that costs about what one after the other does,
# and a machine with more cores waits half as long.
build() {
	local start=$SECONDS
	local gocache=$work/gocache$1
	[ "$cache" = shared ] && gocache=$(go env GOCACHE)
	GOCACHE=$gocache GOFLAGS=-modcacherw \
		make --no-print-directory -C "$work/clone$1" "$target" IMAGE_DIR="$work/out$1" >"$work/build$1.log" 2>&1 ||
		{ cat "$work/build$1.log" >&2; echo "clone $1: make $target failed" >&2; return 1; }
	echo "clone $1: make $target with the $cache Go build cache took $((SECONDS - start)) s"
}
build 1 & p1=$!
build 2 & p2=$!
wait $p1 && wait $p2

for i in 1 2; do
	tool=$work/clone$i/bin/tools/kobe-image
	digest[i]=$("$tool" inspect "$work/out$i/$out" | sed -n 's/^  "digest": "\(.*\)",$/\1/p')
	sum[i]=$(sha256sum <"$work/out$i/$out" | cut -d' ' -f1)
	echo "clone $i: image digest ${digest[i]}, tarball sha256 ${sum[i]}"
done
if [ "${digest[1]}" != "${digest[2]}" ] || [ "${sum[1]}" != "${sum[2]}" ]; then
	echo "NOT reproducible: commit $commit gave two different images" >&2
	exit 1
fi
echo "reproducible: commit $commit gives ${digest[1]} in both clones"
