// Command coredns is the cluster DNS of every member with nodes: CoreDNS,
// built from its Go module with only the plugins a member's Corefile uses
// (docs/nodes.md, "Cluster DNS"), packed into an image on the machine by
// `make image-coredns`, so nothing is pulled. Its second use is the
// DNSHealthy probe: `coredns probe NAME...` resolves each name through the
// pod's resolv.conf and exits 0 only when every one has an address.
package main

import (
	"os"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins of the member's Corefile, and nothing else: the full
	// set pulls in every cloud SDK CoreDNS supports.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is the order in which the plugins above handle a query: the
// subsequence of CoreDNS's own order (core/dnsserver/zdirectives.go) that
// this build includes.
var directives = []string{
	"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance",
	"cache", "kubernetes", "loop", "forward",
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(probe(os.Args[2:]))
	}
	dnsserver.Directives = directives
	coremain.Run()
}
