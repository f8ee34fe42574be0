#!/usr/bin/env bash
# Builds the node image of the kubernetes backend's node pods
# (docs/backends.md, "Node pods"): kobe-node, containerd, its runc shim,
# ctr and runc (Debian's, with the shared libraries ldd lists), kubelet and
# kube-proxy, the CNI plugins, iptables (nf_tables, with its extensions),
# busybox (sh, mount, umount, ip) and the pause and CoreDNS images' archives, in one
# layer, with kobe-image. Run by `make image-node`; the test of node pods
# runs it with NODE_PRELOAD to add workload images.
#
# Environment: OUT (the tarball), NAME (its reference), KOBE_NODE (a static
# kobe-node), NODE_DIR (kubelet and kube-proxy), PAUSE_TAR, COREDNS_TAR, IMAGE_TOOL,
# CREATED (Unix seconds), PLATFORM; NODE_PRELOAD: image archives put in
# /usr/local/share/kobe-node/images/ beside pause.tar.
set -euo pipefail

: "${OUT:?}" "${NAME:?}" "${KOBE_NODE:?}" "${NODE_DIR:?}" "${PAUSE_TAR:?}" "${COREDNS_TAR:?}" "${IMAGE_TOOL:?}"
CREATED=${CREATED:-0}
PLATFORM=${PLATFORM:-linux/amd64}
images=/usr/local/share/kobe-node/images

need() {
	command -v "$1" >/dev/null 2>&1 || { echo "image-node: $1 is missing: run hack/node-deps.sh (as root)" >&2; exit 1; }
	command -v "$1"
}
containerd=$(need containerd)
shim=$(need containerd-shim-runc-v2)
ctr=$(need ctr)
runc=$(need runc)
busybox=$(need busybox)
xtables=$(readlink -f "$(need xtables-nft-multi)")
xtdir=$(dirname "$(readlink -f /usr/lib/*/xtables/libxt_MASQUERADE.so 2>/dev/null || true)")
[ -d "$xtdir" ] || { echo "image-node: iptables' extensions (libxt_*.so) are missing" >&2; exit 1; }

etc=$(mktemp -d)
trap 'rm -rf "$etc"' EXIT
# kubelet reads /etc/passwd (its user namespace mappings) and fails without one.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$etc/group"

args=()
file() { args+=(--file "$1:$2${3:+:$3}"); }
link() { args+=(--symlink "$1:$2"); }

file "$etc/passwd" /etc/passwd 0644
file "$etc/group" /etc/group 0644
file "$KOBE_NODE" /usr/local/bin/kobe-node
file "$containerd" /usr/local/bin/containerd
file "$shim" /usr/local/bin/containerd-shim-runc-v2
file "$ctr" /usr/local/bin/ctr
file "$runc" /usr/local/bin/runc
for b in kubelet kube-proxy; do
	file "$NODE_DIR/$b" "/usr/local/bin/$b"
done
for p in bridge host-local loopback portmap; do
	file "/usr/lib/cni/$p" "/opt/cni/bin/$p"
done
file "$busybox" /bin/busybox
for a in sh mount umount ip cat ls ps grep mkdir tail; do
	link "/bin/$a" busybox
done
file "$xtables" /usr/sbin/xtables-nft-multi
for v in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	link "/usr/sbin/$v" xtables-nft-multi
done
for so in "$xtdir"/*.so; do
	file "$so" "$xtdir/$(basename "$so")" 0644
done
file "$PAUSE_TAR" "$images/pause.tar" 0644
file "$COREDNS_TAR" "$images/coredns.tar" 0644
for a in ${NODE_PRELOAD:-}; do
	file "$a" "$images/$(basename "$a")" 0644
done

# The shared libraries of the dynamic binaries, at the paths the loader
# looks in (ldd's), resolved to the files.
libs=$(for b in "$containerd" "$shim" "$ctr" "$runc" "$xtables" "$xtdir"/*.so; do
	ldd "$b" 2>/dev/null | awk '/=> \//{print $3} /^\t\/[^ ]*ld-linux/{print $1}'
done | sort -u)
for l in $libs; do
	file "$(readlink -f "$l")" "$l" 0755
done

"$IMAGE_TOOL" build --out "$OUT" --name "$NAME" "${args[@]}" \
	--entrypoint /usr/local/bin/kobe-node --user 0:0 --platform "$PLATFORM" --created "$CREATED" \
	--label org.opencontainers.image.title=kobe-node
