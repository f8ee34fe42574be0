#!/usr/bin/env bash
# Builds the control-plane binaries that kobe's tests and the local backend run:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler (from Go modules)
# (and kubectl when the machine has none).
#
# Output: bin/controlplane/<k8s version>/, git-ignored. A binary that already
# exists is not rebuilt, so a warm run costs nothing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
k8s_version=${K8S_VERSION:-1.37.2}
out=${CONTROLPLANE_DIR:-$root/bin/controlplane/$k8s_version}
mkdir -p "$out"

build() { # name, module dir, package
	local name=$1 dir=$2 pkg=$3
	if [ -x "$out/$name" ]; then
		return 0
	fi
	echo "building $name into $out (first time: a few minutes)" >&2
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
}

build etcd "$root/hack/controlplane/etcd" .
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
	build "$cmd" "$root/hack/controlplane/kubernetes" "k8s.io/kubernetes/cmd/$cmd"
done
# kwok simulates the node of members whose pool asks for scheduling
# (backend.local.scheduling); it needs its stage definitions beside it.
kwok_version=v0.8.0
if [ ! -x "$out/kwok" ]; then
	echo "building kwok $kwok_version into $out" >&2
	GOBIN="$out" CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"
fi
if [ ! -d "$out/kwok-stages" ]; then
	kwok_dir=$(go mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	mkdir -p "$out/kwok-stages.tmp"
	cp "$kwok_dir"/kustomize/stage/node/fast/node-*.yaml "$kwok_dir"/kustomize/stage/pod/fast/pod-*.yaml "$out/kwok-stages.tmp/"
	chmod 644 "$out"/kwok-stages.tmp/*
	mv "$out/kwok-stages.tmp" "$out/kwok-stages"
fi

# kubectl comes with the machine; build it from the same module when it
# does not, so that tests and `make run` find one on PATH.
if ! command -v kubectl >/dev/null 2>&1; then
	build kubectl "$root/hack/controlplane/kubernetes" "k8s.io/kubernetes/cmd/kubectl"
fi
echo "$out"
