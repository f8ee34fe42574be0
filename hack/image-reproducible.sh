#!/usr/bin/env bash
# Checks that the kobe-operator image is reproducible: builds it with `make
# image` in two fresh clones of one commit, each with an empty Go build cache
# of its own (the module download cache is shared: it holds sources, not
# build results), and fails unless both tarballs, and so both digests, are
# identical. Prints each build's time and the digests.
#
#   hack/image-reproducible.sh [commit]     (default: HEAD; `make image-reproducible`)
#
# Slow: each build compiles the operator and its dependencies from nothing
# (docs/images.md has the figures), so it is not part of `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
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
	GOCACHE=$work/gocache$1 GOFLAGS=-modcacherw \
		make --no-print-directory -C "$work/clone$1" image IMAGE_DIR="$work/out$1" >"$work/build$1.log" 2>&1 ||
		{ cat "$work/build$1.log" >&2; echo "clone $1: make image failed" >&2; return 1; }
	echo "clone $1: make image with an empty GOCACHE took $((SECONDS - start)) s"
}
build 1 & p1=$!
build 2 & p2=$!
wait $p1 && wait $p2

for i in 1 2; do
	tool=$work/clone$i/bin/tools/kobe-image
	digest[i]=$("$tool" inspect "$work/out$i/kobe-operator.tar" | sed -n 's/^  "digest": "\(.*\)",$/\1/p')
	sum[i]=$(sha256sum <"$work/out$i/kobe-operator.tar" | cut -d' ' -f1)
	echo "clone $i: image digest ${digest[i]}, tarball sha256 ${sum[i]}"
done
if [ "${digest[1]}" != "${digest[2]}" ] || [ "${sum[1]}" != "${sum[2]}" ]; then
	echo "NOT reproducible: commit $commit gave two different images" >&2
	exit 1
fi
echo "reproducible: commit $commit gives ${digest[1]} in both clones"
