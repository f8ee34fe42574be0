package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The host side of local members' node networks. Every member with nodes
// gets a slot; the slot decides every name and address, so the host state of
// a member is found again from its slot alone (after a restart, or by a
// sweep) and nothing of it is kept only in memory.
//
// All ranges are inside 198.18.0.0/15 (reserved for benchmarks: nothing on
// this machine or beyond answers for it) and outside the test host
// cluster's halves (198.18.0.0/17, 198.19.0.0/17):
//
//	pods      198.18.128.0/17: member s node i = 198.18.(128+4s+i).0/24
//	services  198.19.128.0/19: member s = 198.19.(128+s).0/24
//	links     198.19.192.0/19: member s = 198.19.(192+s).0/24 on bridge kbm<s>,
//	          the host (and the member's API server) .1, node i .(10+i)
const (
	// MaxSlots is how many members with nodes one host runs at once.
	MaxSlots = 32
	// MaxNodes is the most nodes of one member.
	MaxNodes = 4
)

var (
	// PodRegion and ServiceRegion are routed to nowhere on the host as a
	// whole, so that a packet for an address no member uses is refused on
	// the machine instead of following the default route out of it.
	PodRegion     = netip.MustParsePrefix("198.18.128.0/17")
	ServiceRegion = netip.MustParsePrefix("198.19.128.0/17")
)

// MemberNet is the network of one member with nodes.
type MemberNet struct {
	Slot int
	// Bridge is the member's bridge on the host (kbm<slot>); its nodes'
	// veths are its ports.
	Bridge string
	// Gateway is the host's address on Bridge: the nodes' default route
	// and the address the member's API server listens on.
	Gateway netip.Addr
	// Link is the subnet of Bridge.
	Link netip.Prefix
	// ClusterCIDR holds every node's pod range.
	ClusterCIDR netip.Prefix
	// ServiceCIDR is the member's Service range (--service-cluster-ip-range).
	ServiceCIDR netip.Prefix
	Nodes       []NodeNet
}

// NodeNet is the network of one node.
type NodeNet struct {
	Index int
	// HostInterface is the host's end of the node's veth (kbm<slot>n<i>);
	// the node's end is "eth0" in its own network namespace.
	HostInterface string
	// Address is the node's IP on the member's link, with the link's prefix.
	Address netip.Prefix
	// PodCIDR is the node's pod range.
	PodCIDR netip.Prefix
}

// NodeInterface is the name of a node's end of its veth.
const NodeInterface = "eth0"

// PlanMember returns the network of the member in slot with nodes nodes.
func PlanMember(slot, nodes int) (MemberNet, error) {
	if slot < 0 || slot >= MaxSlots {
		return MemberNet{}, fmt.Errorf("slot %d is outside [0,%d)", slot, MaxSlots)
	}
	if nodes < 1 || nodes > MaxNodes {
		return MemberNet{}, fmt.Errorf("%d nodes is outside [1,%d]", nodes, MaxNodes)
	}
	link := netip.AddrFrom4([4]byte{198, 19, byte(192 + slot), 0})
	m := MemberNet{
		Slot:        slot,
		Bridge:      BridgeName(slot),
		Gateway:     netip.AddrFrom4([4]byte{198, 19, byte(192 + slot), 1}),
		Link:        netip.PrefixFrom(link, 24),
		ClusterCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(128 + 4*slot), 0}), 22),
		ServiceCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(128 + slot), 0}), 24),
	}
	for i := range nodes {
		m.Nodes = append(m.Nodes, NodeNet{
			Index:         i,
			HostInterface: m.Bridge + "n" + strconv.Itoa(i),
			Address:       netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(192 + slot), byte(10 + i)}), 24),
			PodCIDR:       netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(128 + 4*slot + i), 0}), 24),
		})
	}
	return m, nil
}

// BridgeName is the host bridge of the member in slot.
func BridgeName(slot int) string { return "kbm" + strconv.Itoa(slot) }

// KubernetesServiceIP is the ClusterIP of the member's "kubernetes"
// Service: the first address of ServiceCIDR. It belongs in the API server's
// serving certificate.
func (m MemberNet) KubernetesServiceIP() netip.Addr { return m.ServiceCIDR.Addr().Next() }

// PeerRoutes are node i's routes to the other nodes' pod ranges, straight
// over the member's bridge.
func (m MemberNet) PeerRoutes(i int) []Route {
	var rs []Route
	for _, n := range m.Nodes {
		if n.Index != i {
			rs = append(rs, Route{Dst: n.PodCIDR.String(), Via: n.Address.Addr().String()})
		}
	}
	return rs
}

// TableName is the member's nftables table (family inet).
func TableName(slot int) string { return "kobe-m" + strconv.Itoa(slot) }

// Egress is what a member's pods reach beyond their member.
type Egress struct {
	// Public lets them reach public unicast IPv4 addresses.
	Public bool
	// Allow are more ranges they reach, whatever Public says.
	Allow []netip.Prefix
}

func (e Egress) any() bool { return e.Public || len(e.Allow) > 0 }

var (
	// neverReachable are refused before anything is allowed: loopback,
	// "this network", link-local (cloud metadata lives at
	// 169.254.169.254), multicast and the reserved top.
	neverReachable = []string{"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"}
	// notPublic are the IPv4 ranges that are not public unicast: private
	// (RFC 1918), shared (RFC 6598; Alibaba's metadata is 100.100.100.200),
	// IETF protocol assignments, documentation, and the benchmark range
	// 198.18.0.0/15 that members and the test host cluster use.
	notPublic = []string{"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24"}
)

// NotPublicRanges are the IPv4 ranges a member's pods reach only when the
// pool lists them (egress.allowCIDRs), even with egress Public, and
// never those of neverReachable: both, for firewalls other than the local
// backend's (the in-cluster NetworkPolicy).
func NotPublicRanges() []string { return slices.Concat(neverReachable, notPublic) }

// NeverReachableRanges are the IPv4 ranges a member's pods never reach,
// whatever their egress lists, for firewalls other than the local
// backend's.
func NeverReachableRanges() []string { return slices.Clone(neverReachable) }

// nftScript is the member's firewall, replaced as a whole:
//   - its pods and nodes talk to each other (bridged on Bridge);
//   - nothing is forwarded between it and another member, the test host
//     cluster or anything else that did not answer a connection of its
//     own; its own connections beyond the host go only where egress says
//     (masqueraded), never to loopback, link-local or multicast;
//   - on the host it reaches its own API server and nothing else (no
//     operator API, no other member's API server, no host service).
//
// Refusals answer (a TCP reset, else ICMP admin-prohibited), so a
// connection attempt fails at once instead of timing out.
func nftScript(m MemberNet, apiPort int, egress Egress) string {
	t, br := TableName(m.Slot), m.Bridge
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", t, t, t)
	b.WriteString("  chain forward {\n    type filter hook forward priority filter - 10; policy accept;\n")
	fmt.Fprintf(&b, "    iifname %q oifname %q accept\n", br, br)
	fmt.Fprintf(&b, "    oifname %q ct state established,related accept\n", br)
	refuse(&b, fmt.Sprintf("oifname %q", br))
	refuse(&b, fmt.Sprintf("iifname %q oifname \"kbm*\"", br))
	if egress.any() {
		refuse(&b, fmt.Sprintf("iifname %q ip daddr { %s }", br, strings.Join(neverReachable, ", ")))
		if len(egress.Allow) > 0 {
			allow := make([]string, len(egress.Allow))
			for i, p := range egress.Allow {
				allow[i] = p.Masked().String()
			}
			fmt.Fprintf(&b, "    iifname %q ip daddr { %s } accept\n", br, strings.Join(allow, ", "))
		}
		if egress.Public {
			refuse(&b, fmt.Sprintf("iifname %q ip daddr { %s }", br, strings.Join(notPublic, ", ")))
			fmt.Fprintf(&b, "    iifname %q meta nfproto ipv4 accept\n", br)
		}
	}
	refuse(&b, fmt.Sprintf("iifname %q", br))
	b.WriteString("  }\n")
	b.WriteString("  chain input {\n    type filter hook input priority filter - 10; policy accept;\n")
	fmt.Fprintf(&b, "    iifname %q ct state established,related accept\n", br)
	fmt.Fprintf(&b, "    iifname %q ip daddr %s tcp dport %d accept\n", br, m.Gateway, apiPort)
	refuse(&b, fmt.Sprintf("iifname %q", br))
	b.WriteString("  }\n")
	if egress.any() {
		b.WriteString("  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n")
		fmt.Fprintf(&b, "    oifname != \"kbm*\" ip saddr { %s, %s } masquerade\n", m.ClusterCIDR, m.Link)
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// refuse writes the rules that refuse what match selects: a TCP reset for
// TCP (Linux takes an ICMP error to a connection attempt as a soft error
// and keeps retrying until its timeout), ICMP admin-prohibited otherwise.
func refuse(b *strings.Builder, match string) {
	fmt.Fprintf(b, "    %s meta l4proto tcp reject with tcp reset\n", match)
	fmt.Fprintf(b, "    %s reject with icmpx admin-prohibited\n", match)
}

// SetUpMemberNetwork makes the member's host network: the region routes,
// the bridge with the gateway address, a route to each node's pod range via
// the node's address, and the member's nftables table. It is idempotent and
// is called before the member's API server starts (it listens on Gateway),
// and again whenever the API server's port changes.
func SetUpMemberNetwork(ctx context.Context, m MemberNet, apiPort int, egress Egress) error {
	if apiPort <= 0 || apiPort > 65535 {
		return fmt.Errorf("API server port %d is not a port", apiPort)
	}
	if err := regionRoutes(ctx); err != nil {
		return err
	}
	if err := ensureBridge(ctx, m); err != nil {
		return err
	}
	for _, n := range m.Nodes {
		if _, err := run(ctx, nil, "ip", "route", "replace", n.PodCIDR.String(), "via", n.Address.Addr().String(), "dev", m.Bridge, "onlink"); err != nil {
			return fmt.Errorf("routing %s to node %d: %w", n.PodCIDR, n.Index, err)
		}
	}
	if _, err := run(ctx, []byte(nftScript(m, apiPort, egress)), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("loading nftables table %s: %w", TableName(m.Slot), err)
	}
	if egress.any() {
		// Egress leaves through another interface of the host, which
		// forwards only with this set. It is machine-wide and left on:
		// each member's table refuses what its pool does not allow, and
		// other members' bridges forward nothing beyond them.
		if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
	}
	return nil
}

// regionRoutes routes both regions nowhere (more specific routes of the
// members win). A host that cannot make them must not run nodes.
func regionRoutes(ctx context.Context) error {
	for _, p := range []netip.Prefix{PodRegion, ServiceRegion} {
		if _, err := run(ctx, nil, "ip", "route", "replace", "unreachable", p.String()); err != nil {
			return fmt.Errorf("routing %s nowhere (refusing to run nodes without it): %w", p, err)
		}
	}
	return nil
}

func ensureBridge(ctx context.Context, m MemberNet) error {
	if !linkExists(ctx, m.Bridge) {
		if _, err := run(ctx, nil, "ip", "link", "add", m.Bridge, "type", "bridge"); err != nil && !linkExists(ctx, m.Bridge) {
			return fmt.Errorf("creating bridge %s: %w", m.Bridge, err)
		}
	}
	gw := netip.PrefixFrom(m.Gateway, m.Link.Bits()).String()
	for _, args := range [][]string{
		{"addr", "replace", gw, "dev", m.Bridge},
		{"link", "set", m.Bridge, "up"},
	} {
		if _, err := run(ctx, nil, "ip", args...); err != nil {
			return fmt.Errorf("setting up bridge %s: %w", m.Bridge, err)
		}
	}
	return nil
}

// AttachNode creates node i's veth: the host end on the member's bridge,
// the other end, NodeInterface, in the network namespace of process pid
// (kobe-node, started in a namespace of its own). The veth dies with that
// namespace. A host end that exists already is left as it is.
func AttachNode(ctx context.Context, m MemberNet, i, pid int) error {
	if i < 0 || i >= len(m.Nodes) {
		return fmt.Errorf("member in slot %d has no node %d", m.Slot, i)
	}
	hostIf := m.Nodes[i].HostInterface
	if !linkExists(ctx, hostIf) {
		if _, err := run(ctx, nil, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", NodeInterface, "netns", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("creating node %d's veth into process %d: %w", i, pid, err)
		}
	}
	if _, err := run(ctx, nil, "ip", "link", "set", hostIf, "master", m.Bridge, "up"); err != nil {
		return fmt.Errorf("attaching %s to %s: %w", hostIf, m.Bridge, err)
	}
	return nil
}

// TearDownMemberNetwork removes what SetUpMemberNetwork and AttachNode made
// for slot: the nftables table, the veths, the bridge (with its routes) and,
// once no member bridge is left, the region routes. It is idempotent.
func TearDownMemberNetwork(ctx context.Context, slot int) error {
	var errs []error
	if out, err := run(ctx, nil, "nft", "delete", "table", "inet", TableName(slot)); err != nil && !strings.Contains(out, "No such file") {
		errs = append(errs, fmt.Errorf("deleting nftables table %s: %w", TableName(slot), err))
	}
	br := BridgeName(slot)
	for i := range MaxNodes {
		if err := deleteLink(ctx, br+"n"+strconv.Itoa(i)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := deleteLink(ctx, br); err != nil {
		errs = append(errs, err)
	}
	used, err := UsedSlots(ctx)
	if err != nil {
		errs = append(errs, err)
	} else if len(used) == 0 {
		for _, p := range []netip.Prefix{PodRegion, ServiceRegion} {
			if out, err := run(ctx, nil, "ip", "route", "del", "unreachable", p.String()); err != nil && !strings.Contains(out, "No such process") {
				errs = append(errs, fmt.Errorf("removing the route of %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

func deleteLink(ctx context.Context, name string) error {
	if !linkExists(ctx, name) {
		return nil
	}
	if _, err := run(ctx, nil, "ip", "link", "del", name); err != nil && linkExists(ctx, name) {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	return nil
}

var bridgePattern = regexp.MustCompile(`^kbm([0-9]{1,2})$`)

// UsedSlots are the slots whose bridge exists on the host.
func UsedSlots(ctx context.Context) ([]int, error) {
	names, err := linkNames(ctx, "type", "bridge")
	if err != nil {
		return nil, fmt.Errorf("listing bridges: %w", err)
	}
	var slots []int
	for _, name := range names {
		if mm := bridgePattern.FindStringSubmatch(name); mm != nil {
			if s, err := strconv.Atoi(mm[1]); err == nil && s < MaxSlots {
				slots = append(slots, s)
			}
		}
	}
	sort.Ints(slots)
	return slots, nil
}

// MemberLinks are the links of slot present on the host (for leak checks).
func MemberLinks(ctx context.Context, slot int) ([]string, error) {
	names, err := linkNames(ctx)
	if err != nil {
		return nil, err
	}
	br := BridgeName(slot)
	var links []string
	for _, name := range names {
		if name == br || strings.HasPrefix(name, br+"n") {
			links = append(links, name)
		}
	}
	return links, nil
}

// linkNames are the names of the host's links (`ip -o link show [filter]`,
// whose lines read "12: kbm3n0@if2: <BROADCAST,...> ...").
func linkNames(ctx context.Context, filter ...string) ([]string, error) {
	out, err := run(ctx, nil, "ip", append([]string{"-o", "link", "show"}, filter...)...)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			names = append(names, name)
		}
	}
	return names, nil
}

func linkExists(ctx context.Context, name string) bool {
	_, err := run(ctx, nil, "ip", "link", "show", "dev", name)
	return err == nil
}

// run runs a network command; its output is returned for error matching
// and carried in the error.
func run(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
