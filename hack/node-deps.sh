#!/usr/bin/env bash
# Installs the Debian packages a real node needs (containerd, runc, the CNI
# plugins, iptables, conntrack) when any is missing; does nothing when all
# are there (it also installs nftables, see below). Installing needs root; as another user it names what is missing
# and fails. `make test-node` calls it, and so can .ci/run.
set -euo pipefail

# nftables gives the host cluster's teardown and snapshot `nft`: iptables
# here is the nf_tables variant, whose tables only nft can list whole and
# delete once kube-proxy's and the CNI plugins' rules are gone.
# busybox-static gives the node image (make image-node) its shell, mount and ip.
pkgs=(containerd runc containernetworking-plugins iptables conntrack nftables busybox-static)

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "the real-node tests need the Debian packages ${missing[*]}, and installing them needs root:" >&2
	echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
	echo "(the node tests also run kubelet and containerd, which need root)" >&2
	exit 1
fi

echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
	# A fresh machine may have no package lists yet.
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
