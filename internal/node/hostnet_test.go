package node

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPlanMember(t *testing.T) {
	m, err := PlanMember(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"bridge":   "kbm3",
		"gateway":  "198.19.195.1",
		"link":     "198.19.195.0/24",
		"cluster":  "198.18.140.0/22",
		"service":  "198.19.131.0/24",
		"k8s svc":  "198.19.131.1",
		"node0 if": "kbm3n0",
		"node0":    "198.19.195.10/24",
		"node0 p":  "198.18.140.0/24",
		"node1 if": "kbm3n1",
		"node1":    "198.19.195.11/24",
		"node1 p":  "198.18.141.0/24",
	}
	got := map[string]string{
		"bridge": m.Bridge, "gateway": m.Gateway.String(), "link": m.Link.String(),
		"cluster": m.ClusterCIDR.String(), "service": m.ServiceCIDR.String(), "k8s svc": m.KubernetesServiceIP().String(),
		"node0 if": m.Nodes[0].HostInterface, "node0": m.Nodes[0].Address.String(), "node0 p": m.Nodes[0].PodCIDR.String(),
		"node1 if": m.Nodes[1].HostInterface, "node1": m.Nodes[1].Address.String(), "node1 p": m.Nodes[1].PodCIDR.String(),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %s, want %s", k, got[k], v)
		}
	}
	if r := m.PeerRoutes(0); len(r) != 1 || r[0] != (Route{Dst: "198.18.141.0/24", Via: "198.19.195.11"}) {
		t.Errorf("PeerRoutes(0) = %v", r)
	}
	for _, bad := range [][2]int{{-1, 1}, {MaxSlots, 1}, {0, 0}, {0, MaxNodes + 1}} {
		if _, err := PlanMember(bad[0], bad[1]); err == nil {
			t.Errorf("PlanMember(%d, %d) accepted", bad[0], bad[1])
		}
	}
}

// Every range of every slot stays inside its region, inside 198.18.0.0/15,
// out of the test host cluster's halves, and apart from every other
// member's; interface names fit IFNAMSIZ.
func TestPlansNeverOverlap(t *testing.T) {
	bench := netip.MustParsePrefix("198.18.0.0/15")
	hostCluster := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/17"), netip.MustParsePrefix("198.19.0.0/17")}
	var all []netip.Prefix
	for s := range MaxSlots {
		m, err := PlanMember(s, MaxNodes)
		if err != nil {
			t.Fatal(err)
		}
		ps := []netip.Prefix{m.Link, m.ServiceCIDR}
		for _, n := range m.Nodes {
			ps = append(ps, n.PodCIDR)
			if len(n.HostInterface) > 15 {
				t.Errorf("interface name %s is longer than 15", n.HostInterface)
			}
			if !m.Link.Contains(n.Address.Addr()) || !m.ClusterCIDR.Contains(n.PodCIDR.Addr()) {
				t.Errorf("slot %d node %d is outside its member's ranges", s, n.Index)
			}
		}
		if !PodRegion.Contains(m.ClusterCIDR.Addr()) || !ServiceRegion.Contains(m.ServiceCIDR.Addr()) || !ServiceRegion.Contains(m.Link.Addr()) {
			t.Errorf("slot %d is outside the regions", s)
		}
		for _, p := range ps {
			if !bench.Overlaps(p) || !bench.Contains(p.Addr()) {
				t.Errorf("%s is outside 198.18.0.0/15", p)
			}
			for _, h := range hostCluster {
				if h.Overlaps(p) {
					t.Errorf("%s overlaps the test host cluster's %s", p, h)
				}
			}
			for _, q := range all {
				if q.Overlaps(p) {
					t.Errorf("slot %d's %s overlaps %s", s, p, q)
				}
			}
		}
		all = append(all, ps...)
	}
}

func TestNftScript(t *testing.T) {
	m, _ := PlanMember(5, 1)
	closed := nftScript(m, 6443, Egress{})
	for _, want := range []string{
		"delete table inet kobe-m5",
		`iifname "kbm5" oifname "kbm5" accept`,
		`oifname "kbm5" reject with icmpx admin-prohibited`,
		`oifname "kbm5" meta l4proto tcp reject with tcp reset`,
		`iifname "kbm5" oifname "kbm*" reject`,
		`iifname "kbm5" reject with icmpx admin-prohibited`,
		`iifname "kbm5" ip daddr 198.19.197.1 tcp dport 6443 accept`,
	} {
		if !strings.Contains(closed, want) {
			t.Errorf("script without egress lacks %q:\n%s", want, closed)
		}
	}
	if strings.Contains(closed, "masquerade") {
		t.Errorf("script without egress masquerades:\n%s", closed)
	}
	open := nftScript(m, 6443, Egress{Public: true})
	if !strings.Contains(open, "masquerade") || !strings.Contains(open, `iifname "kbm5" oifname "kbm*" reject`) {
		t.Errorf("script with egress lacks masquerade or member isolation:\n%s", open)
	}
	// Metadata, loopback and private ranges are refused before the
	// public accept, which comes before the final refusal.
	metadata := strings.Index(open, "169.254.0.0/16")
	private := strings.Index(open, "10.0.0.0/8")
	accept := strings.Index(open, `iifname "kbm5" meta nfproto ipv4 accept`)
	final := strings.LastIndex(open, `iifname "kbm5" reject with icmpx admin-prohibited`)
	if metadata < 0 || private < 0 || accept < 0 || metadata > accept || private > accept || accept > final {
		t.Errorf("public egress does not refuse metadata (%d) and private ranges (%d) before accepting (%d):\n%s", metadata, private, accept, open)
	}
	// A listed private range is reachable even with Public, and without
	// Public nothing else is; metadata stays refused first.
	mirror := nftScript(m, 6443, Egress{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}})
	allow := strings.Index(mirror, `ip daddr { 10.20.0.0/16 } accept`)
	if allow < 0 || strings.Index(mirror, "169.254.0.0/16") > allow || strings.Contains(mirror, "nfproto ipv4 accept") {
		t.Errorf("allow-list egress is wrong:\n%s", mirror)
	}
}
