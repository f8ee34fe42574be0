package node

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// dnsGuardRules keep the member's pods to the member's own resolver: a
// DNS packet a pod sends to an address outside the member's pod range
// (clusterCIDR, where its CoreDNS runs; a Service address is already
// rewritten to a pod's by kube-proxy when FORWARD sees it) is dropped. A
// node pod's NetworkPolicy opens port 53 to the host cluster's resolver
// for the node's containerd, and the node forwards its pods' packets under
// its own address, so without this a pod could query the host cluster's
// DNS (its Service names, and a tunnel out where that resolver forwards).
// Each rule is for the FORWARD chain of the mangle table, not filter:
// kube-proxy puts its own rules first in filter's FORWARD, and one of them
// accepts what it marked for masquerading (a pod's packet to a NodePort
// whose endpoint is outside) before any rule of ours.
func dnsGuardRules(clusterCIDR string) [][]string {
	var rules [][]string
	for _, proto := range []string{"udp", "tcp"} {
		rules = append(rules, []string{"-p", proto, "--dport", "53", "!", "-d", clusterCIDR, "-j", "DROP"})
	}
	return rules
}

// guardDNS installs dnsGuardRules in the node's network namespace, once: a
// restarted agent finds the namespace as it left it.
func (a *Agent) guardDNS(ctx context.Context) error {
	iptables := func(args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, "iptables", append([]string{"-w", "-t", "mangle"}, args...)...).CombinedOutput()
	}
	for _, rule := range dnsGuardRules(a.cfg.ClusterCIDR) {
		if _, err := iptables(append([]string{"-C", "FORWARD"}, rule...)...); err == nil {
			continue
		}
		if out, err := iptables(append([]string{"-I", "FORWARD", "1"}, rule...)...); err != nil {
			return fmt.Errorf("iptables -t mangle -I FORWARD %s: %w: %s", strings.Join(rule, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
