#!/usr/bin/env bash
# Builds, without pulling anything, the images the selected conformance
# specs of one Kubernetes version run, under their upstream names (the ones
# `e2e.test --list-images` prints), as archives that local members' nodes
# preload (backend.local.preloadImages):
#
#   hack/conformance/images.sh 1.37.2     # needs bin/conformance/1.37.2 (build-e2e.sh)
#
# Prints the archive names written into IMAGE_DIR (default bin/images), one
# a line. What each image is (docs/conformance.md, "Images"):
#
#   agnhost (current and previous tag)  the release's own agnhost
#       (k8s.io/kubernetes/test/images/agnhost, built by build-e2e.sh) on a
#       base of Debian's busybox-static with the tools agnhost's Alpine base
#       has and the specs call: dig, nslookup and host (bind9-dnsutils),
#       curl, nc (netcat-openbsd), ip (iproute2), getent, bash, with their
#       shared libraries; ENTRYPOINT /agnhost, default arguments "pause", as
#       upstream.
#   busybox                             Debian's busybox-static and its applets,
#       with Debian's bash as /bin/sh (see "sh is bash" below).
#   glibc-dns-testing                   the same base as agnhost (glibc dig
#       and getent: what the upstream Debian image is for).
#   nginx (both tags)                   SUBSTITUTE: agnhost netexec serving
#       HTTP on port 80 (no nginx here); specs that only need a web server on
#       80 cannot tell, specs reading nginx's own pages would.
#   kitten, nautilus                    agnhost test-webserver with the release's
#       test/images/<name>/html files, as upstream.
#   pause                               images/pause, as make image-pause.
#
# An image the specs may name but that is not built here is not faked: its
# pods stay in ErrImageNeverPull/ImagePullBackOff and the spec fails.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
v=${1:?usage: hack/conformance/images.sh VERSION}
v=${v#v}
bindir=$root/bin/conformance/$v
image_dir=${IMAGE_DIR:-$root/bin/images}
tool=${IMAGE_TOOL:-$root/bin/tools/kobe-image}
arch=$(go env GOARCH)
created=$(git -C "$root" log -1 --format=%ct -- hack/conformance hack/image 2>/dev/null || echo 0)
[ -x "$bindir/e2e.test" ] && [ -x "$bindir/agnhost" ] || {
	echo "images: $bindir has no e2e.test/agnhost: run hack/conformance/build-e2e.sh $v" >&2
	exit 1
}
[ -x "$tool" ] || (cd "$root/hack/image" && go build -o "$tool" .)
for b in busybox dig curl nc getent ip bash; do
	command -v "$b" >/dev/null || {
		echo "images: $b is missing: apt-get install busybox-static bind9-dnsutils curl netcat-openbsd iproute2" >&2
		exit 1
	}
done

# Skipped when this script, the binaries and the Debian tools are those of
# the last build and its archives are all there.
stamp=$bindir/images.stamp
key=$(cat "$0" "$bindir/.stamp" "$(command -v busybox)" "$(command -v dig)" "$(command -v bash)" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(head -1 "$stamp")" = "$key" ]; then
	ok=1
	while read -r f; do [ -f "$image_dir/$f" ] || ok=0; done < <(tail -n +2 "$stamp")
	if ((ok)); then
		tail -n +2 "$stamp"
		exit 0
	fi
fi
exec 3>"$stamp.tmp"
echo "$key" >&3

mapfile -t listed < <("$bindir/e2e.test" --list-images 2>/dev/null)
# pick NAME: the listed reference whose repository ends in /NAME, all of them.
# Only registry.k8s.io's: gcr.io/k8s-authenticated-test's agnhost stands for
# an image that must NOT be pullable, and specs check that it is not.
pick() { printf '%s\n' "${listed[@]}" | grep -E "^registry\.k8s\.io/(.*/)?$1:[^/]+$" || true; }

work=$root/bin/conformance/rootfs-$v
rm -rf "$work"
mkdir -p "$work"
base=() # --file/--symlink arguments of the shared base layer

# Busybox and its applets; a path another tool provides below is left to it.
bb=$(command -v busybox)
base+=(--file "$bb:/bin/busybox")
# sh is Debian's bash, not busybox's ash: Debian 12's busybox 1.35 ash drops
# environment variables whose names are not shell identifiers (1-data-1, from
# envFrom prefixes, which Kubernetes allows) before running a command, and
# the conformance specs check that `sh -c env` shows them.
own=" nc ip nslookup bash getent dig host curl sh "
while read -r a; do
	[[ $own == *" ${a##*/} "* ]] && continue
	[ "/$a" = /bin/busybox ] && continue
	base+=(--symlink "/$a:/bin/busybox")
done < <("$bb" --list-full)

# Debian's tools with the shared libraries ldd names, at the same paths.
tools=("$(command -v dig):/usr/bin/dig" "$(command -v nslookup):/usr/bin/nslookup" "$(command -v host):/usr/bin/host"
	"$(command -v curl):/usr/bin/curl" "$(readlink -f "$(command -v nc)"):/usr/bin/nc" "$(command -v getent):/usr/bin/getent"
	"$(command -v ip):/sbin/ip" "$(command -v bash):/bin/bash")
base+=(--symlink /bin/sh:bash)
libs=()
for t in "${tools[@]}"; do
	base+=(--file "$t")
	while read -r l; do libs+=("$l"); done < <(ldd "${t%%:*}" | awk '/=> \//{print $3} /^\t\/[^ ]*ld-linux/{print $1}')
done
for l in $(printf '%s\n' "${libs[@]}" | sort -u); do
	mode=0644
	[[ $l == *ld-linux* ]] && mode=0755 # the loader is executed
	base+=(--file "$(readlink -f "$l"):$l:$mode")
done

# The files an image's /etc holds (kubelet mounts hosts, resolv.conf, hostname).
mkdir -p "$work/etc"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user:/bin/sh\n' >"$work/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >"$work/etc/group"
printf 'hosts: files dns\npasswd: files\ngroup: files\n' >"$work/etc/nsswitch.conf"
: >"$work/empty"
base+=(--file "$work/etc/passwd:/etc/passwd:0644" --file "$work/etc/group:/etc/group:0644"
	--file "$work/etc/nsswitch.conf:/etc/nsswitch.conf:0644" --file "$work/empty:/tmp/.keep:0644"
	--file "$work/empty:/uploads/.keep:0644")

# Entrypoints that give an image the upstream ENTRYPOINT/CMD behaviour
# (kobe-image writes an entrypoint but no CMD): with no arguments, the
# upstream CMD; with arguments (a pod's args), those.
cat >"$work/agnhost-entry" <<'SH'
#!/bin/sh
[ $# -gt 0 ] || set -- pause
exec /agnhost "$@"
SH
cat >"$work/busybox-entry" <<'SH'
#!/bin/sh
[ $# -gt 0 ] || set -- sh
exec "$@"
SH

build() { # NAME ARCHIVE ARGS...: one image
	local name=$1 file=$2
	shift 2
	"$tool" build --out "$image_dir/$file.tmp" --name "$name" --user 0:0 --platform "linux/$arch" --created "$created" "$@" >/dev/null
	mv "$image_dir/$file.tmp" "$image_dir/$file"
	echo "$file"
	echo "$file" >&3
}
archive() { # REF: the archive's file name for an image reference
	local r=${1#registry.k8s.io/}
	r=${r#e2e-test-images/}
	r=${r//\//-}
	echo "e2e-$v-${r//:/-}.tar"
}

for ref in $(pick agnhost) $(pick glibc-dns-testing); do
	build "$ref" "$(archive "$ref")" "${base[@]}" --file "$bindir/agnhost:/agnhost" --symlink /agnhost-2:/agnhost \
		--file "$work/agnhost-entry:/agnhost-entry" --entrypoint /agnhost-entry
done
bash_files=(--file "$(command -v bash):/bin/bash" --symlink /bin/sh:bash)
for l in $(ldd "$(command -v bash)" | awk '/=> \//{print $3} /^\t\/[^ ]*ld-linux/{print $1}'); do
	mode=0644
	[[ $l == *ld-linux* ]] && mode=0755
	bash_files+=(--file "$(readlink -f "$l"):$l:$mode")
done
# kitten and nautilus (kubectl's Update Demo): agnhost with the release's
# own picture and data.json (test/images/<name>/html), serving them with
# test-webserver, as upstream's Dockerfiles say.
kube=$(cd "$root/bin/modules/e2e-$v" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
cat >"$work/webserver-entry" <<'SH'
#!/bin/sh
[ $# -gt 0 ] || set -- test-webserver
exec /agnhost "$@"
SH
for name in kitten nautilus; do
	for ref in $(pick "$name"); do
		build "$ref" "$(archive "$ref")" "${base[@]}" --file "$bindir/agnhost:/agnhost" \
			--file "$kube/test/images/$name/html/$name.jpg:/$name.jpg:0644" --file "$kube/test/images/$name/html/data.json:/data.json:0644" \
			--file "$work/webserver-entry:/webserver-entry" --entrypoint /webserver-entry
	done
done
for ref in $(pick busybox); do
	build "$ref" "$(archive "$ref")" --file "$bb:/bin/busybox" "${bash_files[@]}" $(for a in $("$bb" --list-full); do
		case $a in bin/busybox | bin/sh | bin/bash) ;; *) echo "--symlink /$a:/bin/busybox" ;; esac; done) \
		--file "$work/etc/passwd:/etc/passwd:0644" --file "$work/etc/group:/etc/group:0644" --file "$work/empty:/tmp/.keep:0644" \
		--file "$work/busybox-entry:/busybox-entry" --entrypoint /busybox-entry
done
for ref in $(pick nginx); do
	build "$ref" "$(archive "$ref")" "${base[@]}" --file "$bindir/agnhost:/agnhost" \
		--entrypoint /agnhost --entrypoint netexec --entrypoint --http-port=80 --entrypoint --udp-port=-1
done
for ref in $(pick pause); do
	(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOFLAGS=-buildvcs=false go build -trimpath -ldflags '-s -w' -o "$work/pause" ./images/pause)
	"$tool" build --out "$image_dir/$(archive "$ref").tmp" --name "$ref" --file "$work/pause:/pause" --entrypoint /pause \
		--user 65535:65535 --platform "linux/$arch" --created "$created" >/dev/null
	mv "$image_dir/$(archive "$ref").tmp" "$image_dir/$(archive "$ref")"
	archive "$ref"
	archive "$ref" >&3
done
exec 3>&-
mv "$stamp.tmp" "$stamp"
