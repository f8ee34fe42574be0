//go:build integration

package incluster

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestHostRangesOnARealAPIServer: HostRanges reads the host cluster's
// Nodes (pod ranges, internal and external addresses, not hostnames) and
// its ServiceCIDRs besides the ranges it was given, uses them for a minute,
// and the NetworkPolicies that except them from broad egress are accepted
// by the API server (an except must lie strictly inside its block).
func TestHostRangesOnARealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ns := env.NewNamespace(t)
	c := env.Client
	for i, n := range []struct{ podCIDRs, addrs []string }{
		{[]string{"10.244.0.0/24", "fd00:10:244::/64"}, []string{"192.168.1.10", "52.1.2.3"}},
		{nil, []string{"192.168.1.11"}},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-node-" + string(rune('a'+i))}, Spec: corev1.NodeSpec{PodCIDRs: n.podCIDRs}}
		if len(n.podCIDRs) > 0 {
			node.Spec.PodCIDR = n.podCIDRs[0]
		}
		if err := c.Create(t.Context(), node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(t.Context(), node) })
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: node.Name}}
		for j, a := range n.addrs {
			typ := corev1.NodeInternalIP
			if j == 1 {
				typ = corev1.NodeExternalIP
			}
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: typ, Address: a})
		}
		if err := c.Status().Update(t.Context(), node); err != nil {
			t.Fatal(err)
		}
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := c.List(t.Context(), &cidrs); err != nil || len(cidrs.Items) == 0 || len(cidrs.Items[0].Spec.CIDRs) == 0 {
		t.Fatalf("the API server's ServiceCIDRs: %v %+v", err, cidrs.Items)
	}
	serviceRange := netip.MustParsePrefix(cidrs.Items[0].Spec.CIDRs[0])

	h := &HostRanges{Static: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16")}, Reader: c}
	now := time.Now()
	got, err := h.Ranges(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10.42.0.0/16", "10.244.0.0/24", "fd00:10:244::/64", "192.168.1.10/32", "52.1.2.3/32", "192.168.1.11/32", serviceRange.String()} {
		if !slices.Contains(got, netip.MustParsePrefix(want)) {
			t.Errorf("host ranges %v lack %s", got, want)
		}
	}
	if len(got) != 7 {
		t.Errorf("host ranges %v, want 7", got)
	}

	// A node that joins is seen once the minute is over.
	late := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-node-late"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.9.0/24", PodCIDRs: []string{"10.244.9.0/24"}}}
	if err := c.Create(t.Context(), late); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(t.Context(), late) })
	if again, _ := h.Ranges(t.Context(), now.Add(30*time.Second)); len(again) != len(got) {
		t.Errorf("within the minute: %v, want what was read", again)
	}
	if again, _ := h.Ranges(t.Context(), now.Add(hostRangesTTL)); !slices.Contains(again, netip.MustParsePrefix("10.244.9.0/24")) {
		t.Errorf("after the minute: %v, want the late node's range", again)
	}

	// The policies the ranges go into are valid, however broad the egress;
	// a block inside a host range is left out, and with nothing opened
	// the member's own pods are all there is.
	for i, tc := range []struct {
		egress kobev1.EgressSpec
		rules  int
	}{
		{kobev1.EgressSpec{Mode: kobev1.EgressPublic, AllowCIDRs: []string{"10.0.0.0/8", "192.168.0.0/16", "52.0.0.0/8"}}, 3},
		{kobev1.EgressSpec{AllowCIDRs: []string{"10.244.0.0/24", "10.20.0.5/32"}}, 3},
		{kobev1.EgressSpec{AllowCIDRs: []string{serviceRange.Masked().String()}}, 1},
	} {
		m := member("pool-ci-"+string(rune('0'+i)), kobev1.AccessDirect)
		m.Namespace = ns
		m.Spec.Cluster.Egress = &tc.egress
		np := renderNetworkPolicy(kobev1.BackendKubernetes, m, 6443, map[string]string{"app.kubernetes.io/name": "kobe"}, got)
		np.OwnerReferences = nil // no ClusterInstance behind it here
		if err := c.Create(t.Context(), np); err != nil {
			t.Errorf("egress %+v: %v", tc.egress, err)
			continue
		}
		stored := &networkingv1.NetworkPolicy{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(np), stored); err != nil {
			t.Fatal(err)
		}
		if len(stored.Spec.Egress) != tc.rules {
			t.Errorf("egress %+v: rules %+v, want %d", tc.egress, stored.Spec.Egress, tc.rules)
		}
	}
}
