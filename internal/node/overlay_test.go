package node

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// A node adds a peer only for a statement signed with its member's key for
// the Node it sits on, naming another node pod and one of the member's pod
// ranges: everything a lease holder can write (a forged, altered, moved or
// other member's statement) is refused.
func TestVerifyStatement(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	other := bytes.Repeat([]byte{8}, 32)
	self := overlaySelf{
		name: "m-node-0", ip: netip.MustParseAddr("10.244.1.5"),
		podCIDR: netip.MustParsePrefix("198.19.244.0/24"), clusterCIDR: netip.MustParsePrefix("198.19.244.0/22"),
	}
	peerIP, peerCIDR := netip.MustParseAddr("10.244.2.7"), netip.MustParsePrefix("198.19.245.0/24")
	good := signStatement(key, "m-node-1", peerIP, peerCIDR)
	// altered keeps node-1's MAC but names another address.
	f := strings.Fields(good)
	altered := strings.Join([]string{f[0], "10.96.0.1", f[2], f[3]}, " ")
	for _, c := range []struct {
		name, node, value string
		want              string // "" accepted, else a part of the error
	}{
		{"signed by the member's key", "m-node-1", good, ""},
		{"another address under node-1's MAC", "m-node-1", altered, "MAC"},
		{"node-1's statement on another Node", "m-node-9", good, "MAC"},
		{"another member's key", "m-node-1", signStatement(other, "m-node-1", peerIP, peerCIDR), "MAC"},
		{"no MAC", "m-node-1", strings.Join(f[:3], " "), "version"},
		{"a MAC that is not base64", "m-node-1", strings.Join(append(f[:3:3], "!!"), " "), "MAC"},
		{"another version", "m-node-1", strings.Replace(good, "v1", "v2", 1), "version"},
		{"empty", "m-node-1", "", "version"},
		{"this node's own", "m-node-0", signStatement(key, "m-node-0", self.ip, self.podCIDR), "own"},
		{"this node's address", "m-node-1", signStatement(key, "m-node-1", self.ip, peerCIDR), "no other node pod"},
		{"this node's range", "m-node-1", signStatement(key, "m-node-1", peerIP, self.podCIDR), "this node's"},
		{"a range outside the member's", "m-node-1", signStatement(key, "m-node-1", peerIP, netip.MustParsePrefix("10.0.0.0/24")), "not a node's range"},
		{"a wider range", "m-node-1", signStatement(key, "m-node-1", peerIP, netip.MustParsePrefix("198.19.244.0/22")), "not a node's range"},
		{"an unmasked range", "m-node-1", signStatement(key, "m-node-1", peerIP, netip.MustParsePrefix("198.19.245.9/24")), "not a node's range"},
		{"loopback", "m-node-1", signStatement(key, "m-node-1", netip.MustParseAddr("127.0.0.1"), peerCIDR), "no other node pod"},
		{"link-local (metadata)", "m-node-1", signStatement(key, "m-node-1", netip.MustParseAddr("169.254.169.254"), peerCIDR), "no other node pod"},
		{"IPv6", "m-node-1", signStatement(key, "m-node-1", netip.MustParseAddr("fd00::1"), peerCIDR), "no other node pod"},
		{"an address in the member's pod ranges", "m-node-1", signStatement(key, "m-node-1", netip.MustParseAddr("198.19.246.3"), peerCIDR), "member's pod ranges"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := verifyStatement(key, self, c.node, c.value)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "" && (p.ip != peerIP || p.podCIDR != peerCIDR || p.name != c.node):
				t.Fatalf("peer %+v", p)
			case c.want != "" && err == nil:
				t.Fatalf("accepted %+v", p)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("refused with %q, want it to say %q", err, c.want)
			}
		})
	}
}

// Every node derives its peers' VXLAN endpoints from their pod ranges: the
// range's first address and a locally administered unicast MAC that differs
// between ranges.
func TestVTEP(t *testing.T) {
	a0, m0 := vtep(netip.MustParsePrefix("198.19.244.0/24"))
	a1, m1 := vtep(netip.MustParsePrefix("198.19.245.0/24"))
	if a0 != netip.MustParseAddr("198.19.244.0") || a1 != netip.MustParseAddr("198.19.245.0") {
		t.Errorf("VTEP addresses %s, %s", a0, a1)
	}
	if bytes.Equal(m0, m1) {
		t.Errorf("two ranges share the MAC %s", m0)
	}
	for _, m := range []net.HardwareAddr{m0, m1} {
		if m[0]&0x02 == 0 || m[0]&0x01 != 0 {
			t.Errorf("MAC %s is not locally administered unicast", m)
		}
	}
}

// A node pod's overlay key is its member's: a config with one outside a
// node pod, or a relative one, is refused.
func TestOverlayKeyFileOnlyInPods(t *testing.T) {
	c := testConfig()
	c.Interface, c.Address, c.Gateway, c.PeerRoutes = "", "", "", nil
	c.OverlayKeyFile = "/etc/kobe/node/overlay.key"
	if err := c.Validate(); err != nil {
		t.Errorf("a node pod's config: %v", err)
	}
	c.OverlayKeyFile = "overlay.key"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "overlayKeyFile") {
		t.Errorf("a relative key path: %v", err)
	}
	c = testConfig()
	c.OverlayKeyFile = "/etc/kobe/node/overlay.key"
	if c.Interface == "" {
		t.Fatal("testConfig has no interface")
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "overlayKeyFile") {
		t.Errorf("a key beside an interface: %v", err)
	}
}
