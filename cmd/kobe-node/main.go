// Command kobe-node runs one real node of a local member: containerd,
// kubelet and kube-proxy in the network and mount namespaces the local
// backend started it in (see internal/node).
package main

import (
	"os"

	"github.com/kunobi-ninja/kobe/internal/node"
)

func main() {
	os.Exit(node.Main(os.Args[1:], os.Stderr))
}
