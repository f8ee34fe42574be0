package node

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The pod overlay connects the node pods of one member (in-cluster backends,
// where Config.Interface is empty): each node pod's pod range is routed to the
// others through a VXLAN device, whatever the host cluster's network is.
//
// Who is a peer is never taken from what a lease holder can write. A lease
// holder is system:masters of the member: it can create Nodes, rewrite their
// addresses and annotations, and impersonate any node. So each node publishes
// a statement on its own Node (OverlayAnnotation): its pod IP and pod range,
// with an HMAC-SHA256 under the member's overlay key (Config.OverlayKeyFile),
// which only the member's node pods hold (the PKI Secret of the host cluster,
// never the member's API). A node reads the statements of every Node and adds
// a peer only for one whose MAC holds for that Node's name: forged, altered or
// moved statements are refused before any packet is sent. A replayed statement
// names a node pod of the same member (a node pod keeps its IP for its life).
// Node addresses (InternalIP) are not read at all.
//
// On the node: the VXLAN device OverlayDevice (VNI OverlayVNI, UDP
// OverlayPort, no learning, no default destination: a packet for an address
// without an entry is dropped), its MTU and the pods' OverlayHeader bytes
// below the node pod's link; per peer a route of its pod range via its VTEP
// address, a permanent neighbour and a forwarding entry to its pod IP. The
// node accepts VXLAN packets only from its peers' pod IPs (the iptables
// chain OverlayChain), and forwards from its pods only packets whose source
// is in its own pod range. Peers are only ever added: a node pod's IP does not
// change, and a lease holder who deletes a Node's statement must not be able
// to cut its own nodes apart behind kobe's back either.
const (
	// OverlayAnnotation is the Node annotation that holds a node's statement.
	OverlayAnnotation = "kobe.kunobi.ninja/overlay"
	// OverlayDevice is the VXLAN device in the node pod's network namespace.
	OverlayDevice = "kobe-vxlan"
	// OverlayVNI is the VXLAN network identifier (one segment per member:
	// each member's node pods talk only to their own).
	OverlayVNI = 1
	// OverlayPort is the UDP port of the encapsulated packets (IANA's).
	OverlayPort = 4789
	// OverlayHeader is what encapsulation costs: outer IPv4 20, UDP 8,
	// VXLAN 8 and inner Ethernet 14 bytes.
	OverlayHeader = 50
	// OverlayChain is the iptables chain (filter table) that admits VXLAN
	// packets from peers only.
	OverlayChain = "KOBE-OVERLAY"
	// overlayKeyMin is the shortest overlay key accepted.
	overlayKeyMin = 32
	// statementVersion is the first field of a statement.
	statementVersion = "v1"
)

// overlayPeer is another node of the member, as its verified statement says.
type overlayPeer struct {
	name    string
	ip      netip.Addr
	podCIDR netip.Prefix
}

// overlaySelf is what a node knows of itself, against which statements are
// checked.
type overlaySelf struct {
	name        string
	ip          netip.Addr
	podCIDR     netip.Prefix
	clusterCIDR netip.Prefix
}

// statementMAC is the MAC of a statement: the node's name, pod IP and pod
// range, separated by a byte none of them can hold.
func statementMAC(key []byte, name string, ip netip.Addr, podCIDR netip.Prefix) []byte {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "kobe-overlay-%s\x00%s\x00%s\x00%s", statementVersion, name, ip, podCIDR)
	return h.Sum(nil)
}

// signStatement is node name's statement: "v1 <pod IP> <pod range> <MAC>".
func signStatement(key []byte, name string, ip netip.Addr, podCIDR netip.Prefix) string {
	return strings.Join([]string{statementVersion, ip.String(), podCIDR.String(), base64.RawURLEncoding.EncodeToString(statementMAC(key, name, ip, podCIDR))}, " ")
}

// verifyStatement returns the peer that the statement on Node name says,
// or why it is refused: not this format, a MAC that does not hold for
// this Node's name (forged, altered, or taken from another Node), this
// node itself, a pod range outside the member's or overlapping this node's,
// an address that is no node pod's.
func verifyStatement(key []byte, self overlaySelf, name, value string) (overlayPeer, error) {
	f := strings.Fields(value)
	if len(f) != 4 || f[0] != statementVersion {
		return overlayPeer{}, errors.New("not a statement of this version")
	}
	ip, err := netip.ParseAddr(f[1])
	if err != nil {
		return overlayPeer{}, fmt.Errorf("address: %w", err)
	}
	cidr, err := netip.ParsePrefix(f[2])
	if err != nil {
		return overlayPeer{}, fmt.Errorf("pod range: %w", err)
	}
	mac, err := base64.RawURLEncoding.DecodeString(f[3])
	if err != nil || !hmac.Equal(mac, statementMAC(key, name, ip, cidr)) {
		return overlayPeer{}, errors.New("its MAC does not hold for this Node (not signed with the member's overlay key)")
	}
	switch {
	case name == self.name:
		return overlayPeer{}, errors.New("it is this node's own")
	case !ip.Is4() || ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip == self.ip:
		return overlayPeer{}, fmt.Errorf("address %s is no other node pod's", ip)
	case self.clusterCIDR.Contains(ip):
		return overlayPeer{}, fmt.Errorf("address %s lies in the member's pod ranges", ip)
	case cidr != cidr.Masked() || cidr.Bits() != self.podCIDR.Bits() || !self.clusterCIDR.Contains(cidr.Addr()):
		return overlayPeer{}, fmt.Errorf("pod range %s is not a node's range of %s", cidr, self.clusterCIDR)
	case cidr.Overlaps(self.podCIDR):
		return overlayPeer{}, fmt.Errorf("pod range %s is this node's", cidr)
	}
	return overlayPeer{name: name, ip: ip, podCIDR: cidr}, nil
}

// vtep is the address and MAC of a node's end of the overlay, derived from
// its pod range so that no peer needs to publish them: the range's first
// address (its bridge has the second), and a locally administered MAC
// 02:6b:<the range's four bytes>.
func vtep(podCIDR netip.Prefix) (netip.Addr, net.HardwareAddr) {
	a := podCIDR.Masked().Addr().As4()
	return podCIDR.Masked().Addr(), net.HardwareAddr{0x02, 0x6b, a[0], a[1], a[2], a[3]}
}

// overlay is a node's end of its member's pod overlay.
type overlay struct {
	log  *log.Logger
	key  []byte
	self overlaySelf
	// link is the node pod's interface that holds its IP; mtu is its MTU.
	link netlink.Link
	mtu  int
	dev  netlink.Link

	mu    sync.Mutex
	peers map[netip.Prefix]overlayPeer
	// refused remembers the last refused statement of each Node, so that
	// each is logged once.
	refused map[string]string
}

// newOverlay reads the member's overlay key and finds the node pod's link.
func newOverlay(cfg *Config, nodeIP string, l *log.Logger) (*overlay, error) {
	key, err := os.ReadFile(cfg.OverlayKeyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the overlay key: %w", err)
	}
	if len(key) < overlayKeyMin {
		return nil, fmt.Errorf("the overlay key %s has %d bytes, want at least %d", cfg.OverlayKeyFile, len(key), overlayKeyMin)
	}
	o := &overlay{log: l, key: key, peers: map[netip.Prefix]overlayPeer{}, refused: map[string]string{}}
	o.self.name = cfg.Name
	if o.self.ip, err = netip.ParseAddr(nodeIP); err != nil {
		return nil, err
	}
	if o.self.podCIDR, err = netip.ParsePrefix(cfg.PodCIDR); err != nil {
		return nil, err
	}
	if o.self.clusterCIDR, err = netip.ParsePrefix(cfg.ClusterCIDR); err != nil {
		return nil, err
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip == o.self.ip {
			if o.link, err = netlink.LinkByIndex(a.LinkIndex); err != nil {
				return nil, fmt.Errorf("the link of %s: %w", nodeIP, err)
			}
			o.mtu = o.link.Attrs().MTU
		}
	}
	if o.link == nil {
		return nil, fmt.Errorf("no link holds %s", nodeIP)
	}
	if o.mtu <= OverlayHeader+576 {
		return nil, fmt.Errorf("link %s has an MTU of %d: too small for the overlay's %d bytes", o.link.Attrs().Name, o.mtu, OverlayHeader)
	}
	return o, nil
}

// podMTU is the MTU of the overlay and of the node's pods.
func (o *overlay) podMTU() int { return o.mtu - OverlayHeader }

// setUp makes the VXLAN device and the chain that admits no VXLAN packet
// until a peer is known.
func (o *overlay) setUp(ctx context.Context) error {
	addr, mac := vtep(o.self.podCIDR)
	vx := &netlink.Vxlan{
		LinkAttrs:    netlink.LinkAttrs{Name: OverlayDevice, MTU: o.podMTU(), HardwareAddr: mac},
		VxlanId:      OverlayVNI,
		VtepDevIndex: o.link.Attrs().Index,
		SrcAddr:      o.self.ip.AsSlice(),
		Port:         OverlayPort,
		Learning:     false,
	}
	if old, err := netlink.LinkByName(OverlayDevice); err == nil {
		if err := netlink.LinkDel(old); err != nil {
			return fmt.Errorf("removing an old %s: %w", OverlayDevice, err)
		}
	}
	if err := netlink.LinkAdd(vx); err != nil {
		return fmt.Errorf("adding VXLAN device %s: %w", OverlayDevice, err)
	}
	dev, err := netlink.LinkByName(OverlayDevice)
	if err != nil {
		return err
	}
	o.dev = dev
	if err := netlink.AddrReplace(dev, &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		return fmt.Errorf("addressing %s: %w", OverlayDevice, err)
	}
	if err := netlink.LinkSetUp(dev); err != nil {
		return fmt.Errorf("bringing %s up: %w", OverlayDevice, err)
	}
	for _, args := range [][]string{
		{"-N", OverlayChain},
		{"-A", OverlayChain, "-j", "DROP"},
		{"-I", "INPUT", "1", "-p", "udp", "--dport", fmt.Sprint(OverlayPort), "-j", OverlayChain},
		// A pod (NET_RAW is in baseline) may not forge its source: on a
		// host cluster that lets spoofed packets through, one that claims
		// another member's node pod would pass that member's OverlayChain.
		{"-I", "FORWARD", "1", "-i", podBridge, "!", "-s", o.self.podCIDR.String(), "-j", "DROP"},
	} {
		if out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "-t", "filter"}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	o.log.Printf("overlay %s up: VNI %d, UDP %d from %s, MTU %d (link %s: %d)", OverlayDevice, OverlayVNI, OverlayPort, o.self.ip, o.podMTU(), o.link.Attrs().Name, o.mtu)
	return nil
}

// addPeer routes peer's pod range through the overlay to its pod IP and
// admits its VXLAN packets. Idempotent.
func (o *overlay) addPeer(ctx context.Context, p overlayPeer) error {
	idx := o.dev.Attrs().Index
	addr, mac := vtep(p.podCIDR)
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF, State: netlink.NUD_PERMANENT, IP: p.ip.AsSlice(), HardwareAddr: mac}); err != nil {
		return fmt.Errorf("forwarding entry of %s: %w", p.name, err)
	}
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT, Type: unix.RTN_UNICAST, IP: addr.AsSlice(), HardwareAddr: mac}); err != nil {
		return fmt.Errorf("neighbour entry of %s: %w", p.name, err)
	}
	dst := &net.IPNet{IP: p.podCIDR.Addr().AsSlice(), Mask: net.CIDRMask(p.podCIDR.Bits(), 32)}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: idx, Dst: dst, Gw: addr.AsSlice(), Flags: int(netlink.FLAG_ONLINK)}); err != nil {
		return fmt.Errorf("route to %s: %w", p.podCIDR, err)
	}
	return o.admit(ctx)
}

// admit rewrites OverlayChain at once (iptables-restore): RETURN for each
// peer's pod IP (on to the rest of INPUT), DROP for everyone else.
func (o *overlay) admit(ctx context.Context) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*filter\n:%s - [0:0]\n", OverlayChain)
	for _, p := range o.peers {
		fmt.Fprintf(&b, "-A %s -s %s/32 -j RETURN\n", OverlayChain, p.ip)
	}
	fmt.Fprintf(&b, "-A %s -j DROP\nCOMMIT\n", OverlayChain)
	cmd := exec.CommandContext(ctx, "iptables-restore", "-w", "--noflush")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore of %s: %w: %s", OverlayChain, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// peerList is the verified peers, at the time of the call.
func (o *overlay) peerList() []overlayPeer {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]overlayPeer, 0, len(o.peers))
	for _, p := range o.peers {
		out = append(out, p)
	}
	return out
}

// consider verifies the statement on node n and adds its peer when it is
// new. Refusals are logged once per statement.
func (o *overlay) consider(ctx context.Context, n *corev1.Node) {
	value, ok := n.Annotations[OverlayAnnotation]
	if !ok || n.Name == o.self.name {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	p, err := verifyStatement(o.key, o.self, n.Name, value)
	if err != nil {
		if o.refused[n.Name] != value {
			o.refused[n.Name] = value
			o.log.Printf("refused the overlay statement on Node %s: %v", n.Name, err)
		}
		return
	}
	delete(o.refused, n.Name)
	if old, ok := o.peers[p.podCIDR]; ok && old.ip == p.ip {
		return
	}
	o.peers[p.podCIDR] = p
	if err := o.addPeer(ctx, p); err != nil {
		// Forgotten again: the next event for this Node retries.
		delete(o.peers, p.podCIDR)
		o.log.Printf("adding overlay peer %s: %v", p.name, err)
		return
	}
	o.log.Printf("overlay peer %s: pods %s at %s", p.name, p.podCIDR, p.ip)
}

// run publishes this node's statement with write and follows the member's
// Nodes with read until ctx ends.
func (o *overlay) run(ctx context.Context, read, write *kubernetes.Clientset) {
	go o.publish(ctx, write)
	for ctx.Err() == nil {
		if err := o.follow(ctx, read); err != nil && ctx.Err() == nil {
			o.log.Printf("following the member's Nodes for the overlay: %v", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func clientFor(kubeconfig string) (*kubernetes.Clientset, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	rc.UserAgent = "kobe-node/overlay"
	return kubernetes.NewForConfig(rc)
}

// publish writes this node's statement on its Node once kubelet has
// registered it, retrying every second until it is there.
func (o *overlay) publish(ctx context.Context, c *kubernetes.Clientset) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		OverlayAnnotation: signStatement(o.key, o.self.name, o.self.ip, o.self.podCIDR),
	}}})
	if err != nil {
		o.log.Printf("overlay statement: %v", err)
		return
	}
	var last string
	for {
		_, err := c.CoreV1().Nodes().Patch(ctx, o.self.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kobe-node"})
		if err == nil {
			o.log.Printf("published the overlay statement on Node %s", o.self.name)
			return
		}
		if msg := err.Error(); msg != last {
			last = msg
			o.log.Printf("publishing the overlay statement (retrying every second): %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// follow lists the Nodes, considers each, then watches them until the
// watch ends.
func (o *overlay) follow(ctx context.Context, c *kubernetes.Clientset) error {
	list, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	for i := range list.Items {
		o.consider(ctx, &list.Items[i])
	}
	w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		return fmt.Errorf("watching Nodes: %w", err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified:
			if n, ok := ev.Object.(*corev1.Node); ok {
				o.consider(ctx, n)
			}
		case watch.Error:
			return fmt.Errorf("watching Nodes: %v", ev.Object)
		}
	}
	return nil
}

// startOverlay follows the member's Nodes for peers in the background, for
// as long as the node runs; errors of the API are logged and retried. The
// Nodes are read with kube-proxy's credentials (a kubelet may read only its
// own Node), the statement written with kubelet's (a node may annotate only
// its own Node).
func (a *Agent) startOverlay(ctx context.Context) error {
	if a.overlay == nil {
		return nil
	}
	read, err := clientFor(a.cfg.KubeProxyKubeconfig)
	if err != nil {
		return err
	}
	write, err := clientFor(a.cfg.KubeletKubeconfig)
	if err != nil {
		return err
	}
	go a.overlay.run(ctx, read, write)
	return nil
}
