package node

import (
	"context"
	"os"
)

// StorageRoot is the directory, in every node's mount namespace, under
// which the node-local storage provisioner creates one directory per
// PersistentVolume. The member's admission policy lets hostPath
// PersistentVolumes name only direct children of it, and no pod or
// PersistentVolume may mount the root itself: a mount of the root would let
// a pod plant a symlink that a later PersistentVolume's path follows out of
// it.
const StorageRoot = "/var/lib/kobe-storage"

// StorageCommand is the argument that makes the kobe-node program run the
// node's volume provisioner (internal/nodestorage) instead of a node;
// the agent starts it as a daemon once kubelet and kube-proxy run.
const StorageCommand = "storage"

// storage starts the node's volume provisioner: this program again, with
// StorageCommand, in the node's namespaces, with kubelet's credentials.
// Started by its path (/proc/self/exe as a fallback), so that it shows as
// kobe-node in process lists.
func (a *Agent) storage(context.Context) error {
	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	_, err = a.start("storage", self, StorageCommand, "--kubeconfig", a.cfg.KubeletKubeconfig, "--node", a.cfg.Name)
	return err
}
