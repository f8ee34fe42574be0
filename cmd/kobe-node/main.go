// Command kobe-node runs one real node of a local member: containerd,
// kubelet and kube-proxy in the network and mount namespaces the local
// backend started it in (see internal/node). `kobe-node storage` is the
// node's volume provisioner (internal/nodestorage), which kobe-node starts
// as one of its daemons.
package main

import (
	"os"

	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/nodestorage"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == node.StorageCommand {
		os.Exit(nodestorage.Main(os.Args[2:], os.Stderr))
	}
	os.Exit(node.Main(os.Args[1:], os.Stderr))
}
