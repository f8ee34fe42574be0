#!/usr/bin/env bash
# Builds the control-plane binaries that kobe's tests, `make run` and the
# local backend run, each from a pinned Go module under hack/controlplane:
#
#   kubernetes/  kube-apiserver, kube-controller-manager, kube-scheduler (and
#                kubectl when the machine has none), in one `go build`
#   etcd/        etcd
#   kwok/        kwok, and its stage definitions (kwok-stages/)
#
# Output: bin/controlplane/<k8s version>/ (CONTROLPLANE_DIR overrides it),
# git-ignored. The modules' sources download side by side (network-bound),
# then the Kubernetes commands compile, then etcd and kwok side by side: each
# go process compiles the standard library and shared packages on its own, so
# compiling all three at once on a cold cache would do that work three times
# over. A stamp keyed on the hashes of this script and of the modules' go.mod
# and go.sum skips the whole build when nothing changed (well under a
# second); a version bump rebuilds, and so does a change of the version
# stamp (hack/versions.sh ldflags), since the stamp hashes that script.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
mods=$root/hack/controlplane
k8s_version=$("$root/hack/versions.sh" kubernetes)
out=${CONTROLPLANE_DIR:-$root/bin/controlplane/$k8s_version}

kube_cmds=(kube-apiserver kube-controller-manager kube-scheduler)
# kubectl comes with the machine; build it from the same module when it does
# not, so that tests and `make run` find one on PATH. The Makefile puts $out
# on PATH, so a kubectl found there is one this script built.
found_kubectl=$(command -v kubectl || true)
if [ -z "$found_kubectl" ] || [ "$found_kubectl" = "$out/kubectl" ]; then
	kube_cmds+=(kubectl)
fi
want=("${kube_cmds[@]}" etcd etcdctl kwok kwok-stages)

stamp=$out/.stamp
key=$({
	echo "${want[*]}"
	cat "$0" "$root/hack/versions.sh"
	for m in kubernetes etcd kwok; do cat "$mods/$m/go.mod" "$mods/$m/go.sum"; done
} | sha256sum | cut -d' ' -f1)

complete() {
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] || return 1
	local f
	for f in "${want[@]}"; do [ -e "$out/$f" ] || return 1; done
}
if complete; then
	echo "$out"
	exit 0
fi

mkdir -p "$out"
rm -f "$stamp"
stage=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$stage"' EXIT

export CGO_ENABLED=0
goflags=(-trimpath -ldflags=-s\ -w)
# The Kubernetes commands report their release, not v0.0.0-master
# (hack/versions.sh ldflags). etcd and kwok report theirs without help.
kube_goflags=(-trimpath "-ldflags=-s -w $("$root/hack/versions.sh" ldflags)")

job() { # name, command...: starts it in the background; it logs its duration
	local name=$1
	shift
	(
		start=$SECONDS
		"$@"
		echo "$name: done in $((SECONDS - start))s" >&2
	) &
	pids+=("$!")
	names+=("$name")
}

waitall() { # waits for the jobs started since the last call
	local i failed=()
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed+=("${names[$i]}")
	done
	pids=() names=()
	if [ ${#failed[@]} -gt 0 ]; then
		echo "building the control plane failed: ${failed[*]}" >&2
		exit 1
	fi
}

kube_pkgs=("${kube_cmds[@]/#/k8s.io/kubernetes/cmd/}")

fetch() { # module dir, packages...: downloads what building them needs
	cd "$mods/$1"
	shift
	go list -deps "$@" >/dev/null
}
build_kube() {
	cd "$mods/kubernetes"
	go build "${kube_goflags[@]}" -o "$stage/" "${kube_pkgs[@]}"
}
build_etcd() {
	cd "$mods/etcd"
	go build "${goflags[@]}" -o "$stage/etcd" .
	# etcdctl, for the etcd image: the NetworkPolicy enforcement probe's
	# clients run it (tools.go keeps it in the module).
	go build "${goflags[@]}" -o "$stage/etcdctl" go.etcd.io/etcd/etcdctl/v3
}
build_kwok() {
	cd "$mods/kwok"
	go build "${goflags[@]}" -o "$stage/kwok" sigs.k8s.io/kwok/cmd/kwok
	# kwok does not start without its stage definitions; they live in the
	# module, beside the command.
	local dir
	dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
	mkdir "$stage/kwok-stages"
	cp "$dir"/kustomize/stage/node/fast/node-*.yaml "$dir"/kustomize/stage/pod/fast/pod-*.yaml "$stage/kwok-stages/"
	chmod 644 "$stage"/kwok-stages/*
}

echo "building the control plane $k8s_version into $out (${want[*]}); the first time takes several minutes" >&2
pids=() names=()
job "download kubernetes" fetch kubernetes "${kube_pkgs[@]}"
job "download etcd" fetch etcd . go.etcd.io/etcd/etcdctl/v3
job "download kwok" fetch kwok sigs.k8s.io/kwok/cmd/kwok
waitall
job "build ${kube_cmds[*]}" build_kube
waitall
job "build etcd" build_etcd
job "build kwok" build_kwok
waitall

for f in "${want[@]}"; do
	# A rename replaces a binary atomically, so a test that is starting one
	# meanwhile gets the old or the new file, never half of one.
	if [ -d "$stage/$f" ]; then rm -rf "${out:?}/$f"; fi
	mv -f "$stage/$f" "$out/$f"
done
echo "$key" >"$stamp"
echo "$out"
