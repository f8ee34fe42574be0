package incluster

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

func member(name string, mode kobev1.AccessMode) backend.Member {
	m := backend.Member{Namespace: "kobe", Name: name, UID: "uid-1", Pool: "ci"}
	if mode != "" {
		m.Spec.Access = &kobev1.AccessSpec{Mode: mode}
	}
	return m
}

func TestNames(t *testing.T) {
	long := strings.Repeat("a", 200)
	for _, tc := range []struct{ name, want string }{
		{"pool-ci-0", "kobe-pool-ci-0"},
		{"pool.ci.0", "kobe-pool-ci-0"},
		{"0abc", "kobe-0abc"},
		{long, ""},
	} {
		m := member(tc.name, "")
		got := baseName(m)
		if tc.want != "" && got != tc.want {
			t.Errorf("baseName(%q) = %q, want %q", tc.name, got, tc.want)
		}
		for _, n := range []string{serviceName(m), secretName(m), policyName(m), podName(m, 12)} {
			if errs := validation.IsDNS1035Label(n); len(errs) > 0 {
				t.Errorf("name %q of member %q: %v", n, tc.name, errs)
			}
		}
	}
	a, b := member(long, ""), member(long, "")
	b.UID = "uid-2"
	if baseName(a) == baseName(b) {
		t.Errorf("two long-named members of different UIDs share %q", baseName(a))
	}
	if v := memberLabels(kobev1.BackendKubernetes, member(long, ""))[kobev1.LabelInstance]; len(v) > 63 {
		t.Errorf("instance label %d characters", len(v))
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func TestResources(t *testing.T) {
	def := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("512Mi")},
	}
	for _, tc := range []struct {
		name string
		in   *corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{"unset: defaults", nil, def},
		{"requests only: default limits", &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("200m")}},
			corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("128Mi")},
				Limits:   def.Limits,
			}},
		{"request above the default limit raises the limit", &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
			corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("2Gi")},
			}},
		{"limit below the default request lowers the request", &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: q("50m")}},
			corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("512Mi")},
			}},
		{"other resources are kept", &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: q("1Gi")}},
			corev1.ResourceRequirements{
				Requests: def.Requests,
				Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("512Mi"), corev1.ResourceEphemeralStorage: q("1Gi")},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Resources(tc.in, def); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestNetworkPolicy(t *testing.T) {
	sel := map[string]string{"app.kubernetes.io/name": "kobe"}
	for _, tc := range []struct {
		mode        kobev1.AccessMode
		openToWorld bool
	}{{"", false}, {kobev1.AccessProxy, false}, {kobev1.AccessDirect, true}} {
		np := renderNetworkPolicy(kobev1.BackendKubernetes, member("m", tc.mode), 6443, sel, nil)
		var world, operator, own, bootstrap bool
		for _, r := range np.Spec.Ingress {
			switch {
			case len(r.From) == 0:
				world = len(r.Ports) == 1 && r.Ports[0].Port.IntVal == 6443
				if len(r.Ports) != 1 {
					t.Errorf("mode %q: an ingress rule from anywhere on %v", tc.mode, r.Ports)
				}
			case r.From[0].PodSelector != nil && equality.Semantic.DeepEqual(r.From[0].PodSelector.MatchLabels, sel):
				operator = len(r.Ports) == 1 && r.Ports[0].Port.IntVal == 6443
			case r.From[0].PodSelector != nil && r.From[0].PodSelector.MatchLabels[LabelMemberUID] == "uid-1":
				own = len(r.Ports) == 0
			case r.From[0].PodSelector != nil && equality.Semantic.DeepEqual(r.From[0].PodSelector.MatchLabels, map[string]string{kobev1.LabelBootstrapFor: "uid-1"}):
				// The member's bootstrap Jobs, on the API port only.
				bootstrap = len(r.Ports) == 1 && r.Ports[0].Port.IntVal == 6443
			default:
				t.Errorf("mode %q: unexpected ingress rule %+v", tc.mode, r)
			}
			if len(r.From) > 0 && r.From[0].NamespaceSelector != nil {
				t.Errorf("mode %q: a rule admits other namespaces: %+v", tc.mode, r)
			}
		}
		if world != tc.openToWorld || !operator || !own || !bootstrap {
			t.Errorf("mode %q: world %v operator %v own %v bootstrap Jobs %v", tc.mode, world, operator, own, bootstrap)
		}
		if len(np.Spec.PolicyTypes) != 2 {
			t.Errorf("policy types %v: egress must be restricted too", np.Spec.PolicyTypes)
		}
		// Egress reaches the member's own pods and nothing else: a rule
		// without a peer (port 53 to anywhere, say) is a way out.
		if len(np.Spec.Egress) == 0 {
			t.Errorf("mode %q: no egress rule: the member's pods could not reach each other", tc.mode)
		}
		for _, r := range np.Spec.Egress {
			if len(r.To) == 0 {
				t.Errorf("mode %q: egress to any address on ports %+v", tc.mode, r.Ports)
			}
			for _, peer := range r.To {
				if peer.PodSelector == nil || peer.PodSelector.MatchLabels[LabelMemberUID] != "uid-1" ||
					peer.NamespaceSelector != nil || peer.IPBlock != nil {
					t.Errorf("mode %q: egress to %+v", tc.mode, peer)
				}
			}
		}
	}
}

// TestNetworkPolicyEgress: cluster.egress opens the member's pods as far as
// it says and no further: Public is every address but the non-public ones
// (metadata, private, loopback...), allowCIDRs adds its ranges; every block
// excepts what of the never-reached ranges and of the host cluster's own
// (pods, Services, nodes: other members live there) lies inside it, and a
// block inside one of them is left out; DNS goes to the host cluster's
// resolver pods only, and only when a block opens something; None adds
// nothing.
func TestNetworkPolicyEgress(t *testing.T) {
	sel := map[string]string{"app.kubernetes.io/name": "kobe"}
	// A host cluster on private ranges: pods (a node's podCIDR inside
	// them), Services and a node's address.
	host := prefixes([]string{"10.244.0.0/16", "10.244.1.0/24", "10.96.0.0/12", "192.168.1.10/32"})
	// One on public addresses, which Public must not open either.
	publicHost := prefixes([]string{"11.0.0.0/16", "11.96.0.0/16", "52.1.2.3/32"})
	notPublic := []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24",
		"192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4"}
	type block struct {
		cidr   string
		except []string
	}
	for _, tc := range []struct {
		name   string
		egress *kobev1.EgressSpec
		host   []netip.Prefix
		want   []block
	}{
		{"unset", nil, host, nil},
		{"None", &kobev1.EgressSpec{Mode: kobev1.EgressNone}, host, nil},
		{"Public", &kobev1.EgressSpec{Mode: kobev1.EgressPublic}, nil, []block{{"0.0.0.0/0", notPublic}}},
		{"Public on a private host cluster: its ranges are private already", &kobev1.EgressSpec{Mode: kobev1.EgressPublic}, host,
			[]block{{"0.0.0.0/0", notPublic}}},
		{"Public on a host cluster with public ranges", &kobev1.EgressSpec{Mode: kobev1.EgressPublic}, publicHost,
			[]block{{"0.0.0.0/0", slices.Concat(notPublic[:2], []string{"11.0.0.0/16", "11.96.0.0/16", "52.1.2.3/32"}, notPublic[2:])}}},
		{"a mirror on a private address", &kobev1.EgressSpec{AllowCIDRs: []string{"10.20.0.5/32"}}, host, []block{{"10.20.0.5/32", nil}}},
		{"10.0.0.0/8 leaves the host's pod and Service ranges out", &kobev1.EgressSpec{AllowCIDRs: []string{"10.0.0.0/8"}}, host,
			[]block{{"10.0.0.0/8", []string{"10.96.0.0/12", "10.244.0.0/16"}}}},
		{"192.168.0.0/16 leaves a node out", &kobev1.EgressSpec{AllowCIDRs: []string{"192.168.0.0/16"}}, host,
			[]block{{"192.168.0.0/16", []string{"192.168.1.10/32"}}}},
		{"a range inside the host's pods opens nothing, nor DNS", &kobev1.EgressSpec{AllowCIDRs: []string{"10.244.3.0/24"}}, host, nil},
		{"a range holding metadata (the CRD refuses it; the policy too)", &kobev1.EgressSpec{AllowCIDRs: []string{"160.0.0.0/3"}}, nil,
			[]block{{"160.0.0.0/3", []string{"169.254.0.0/16"}}}},
		{"a range holding multicast and loopback", &kobev1.EgressSpec{AllowCIDRs: []string{"64.0.0.0/2", "224.0.0.0/4"}}, nil,
			[]block{{"64.0.0.0/2", []string{"127.0.0.0/8"}}}},
		{"a CIDR with host bits is masked", &kobev1.EgressSpec{AllowCIDRs: []string{"10.20.0.5/16"}}, host, []block{{"10.20.0.0/16", nil}}},
		{"what is not a CIDR opens nothing", &kobev1.EgressSpec{AllowCIDRs: []string{"bogus"}}, host, nil},
		{"Public and a private range", &kobev1.EgressSpec{Mode: kobev1.EgressPublic, AllowCIDRs: []string{"10.0.0.0/8"}}, host,
			[]block{{"0.0.0.0/0", notPublic}, {"10.0.0.0/8", []string{"10.96.0.0/12", "10.244.0.0/16"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := member("m", "")
			m.Spec.Cluster.Egress = tc.egress
			np := renderNetworkPolicy(kobev1.BackendKubernetes, m, 6443, sel, tc.host)
			var got []block
			dns := false
			for _, r := range np.Spec.Egress[1:] { // [0]: the member's own pods (TestNetworkPolicy)
				for _, peer := range r.To {
					switch {
					case peer.IPBlock != nil:
						got = append(got, block{peer.IPBlock.CIDR, peer.IPBlock.Except})
						if len(r.Ports) != 0 {
							t.Errorf("block %s on ports %v only", peer.IPBlock.CIDR, r.Ports)
						}
						// The API server refuses an except outside its block.
						cidr := netip.MustParsePrefix(peer.IPBlock.CIDR)
						for _, e := range peer.IPBlock.Except {
							if p := netip.MustParsePrefix(e); p.Bits() <= cidr.Bits() || !cidr.Contains(p.Addr()) {
								t.Errorf("except %s is not strictly inside %s", e, cidr)
							}
						}
					case peer.PodSelector != nil && peer.PodSelector.MatchLabels["k8s-app"] == "kube-dns":
						dns = peer.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == "kube-system" && len(r.Ports) == 2 && r.Ports[0].Port.IntVal == 53 && r.Ports[1].Port.IntVal == 53
					default:
						t.Errorf("egress to %+v", peer)
					}
				}
			}
			if !reflect.DeepEqual(got, tc.want) || dns != (len(tc.want) > 0) {
				t.Errorf("egress to %v, DNS %v\nwant %v, DNS %v", got, dns, tc.want, len(tc.want) > 0)
			}
		})
	}
}

// TestExceptWithin: an ipBlock's except is what of the never-reached ranges
// lies strictly inside its CIDR (the API server refuses anything else),
// the widest of nested ones, sorted; a CIDR inside one of them is not
// opened at all; the other address family does not count.
func TestExceptWithin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cidr   string
		out    []string
		except []string
		ok     bool
	}{
		{"disjoint", "10.0.0.0/8", []string{"192.168.0.0/16", "11.0.0.0/8"}, nil, true},
		{"inside one", "10.244.3.0/24", []string{"10.244.0.0/16"}, nil, false},
		{"equal to one", "10.244.0.0/16", []string{"10.244.0.0/16"}, nil, false},
		{"one inside", "10.0.0.0/8", []string{"10.96.0.0/12"}, []string{"10.96.0.0/12"}, true},
		{"nested ones: the widest", "10.0.0.0/8", []string{"10.244.1.0/24", "10.244.0.0/16", "10.244.1.7/32"}, []string{"10.244.0.0/16"}, true},
		{"sorted by address", "0.0.0.0/0", []string{"240.0.0.0/4", "10.0.0.0/8", "127.0.0.0/8"}, []string{"10.0.0.0/8", "127.0.0.0/8", "240.0.0.0/4"}, true},
		{"host bits are masked", "10.1.2.3/8", []string{"10.1.2.3/16"}, []string{"10.1.0.0/16"}, true},
		{"a single address", "192.168.0.0/16", []string{"192.168.1.10/32"}, []string{"192.168.1.10/32"}, true},
		{"IPv4 ignores IPv6", "0.0.0.0/0", []string{"::/0", "fe80::/10"}, nil, true},
		{"IPv6 ignores IPv4", "::/0", []string{"0.0.0.0/0", "127.0.0.0/8"}, nil, true},
		{"IPv6: link-local, loopback, multicast", "::/0", []string{"fe80::/10", "::1/128", "ff00::/8"}, []string{"::1/128", "fe80::/10", "ff00::/8"}, true},
		{"IPv6: nested, disjoint", "2001:db8::/32", []string{"2001:db8:1:2::/64", "2001:db8:1::/48", "fe80::/10"}, []string{"2001:db8:1::/48"}, true},
		{"IPv6: inside one", "fe80::1/128", []string{"fe80::/10"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			except, ok := exceptWithin(netip.MustParsePrefix(tc.cidr), prefixes(tc.out))
			var got []string
			for _, p := range except {
				got = append(got, p.String())
			}
			if ok != tc.ok || !slices.Equal(got, tc.except) {
				t.Errorf("exceptWithin(%s, %v) = %v, %v; want %v, %v", tc.cidr, tc.out, got, ok, tc.except, tc.ok)
			}
		})
	}
}

func TestFinishPod(t *testing.T) {
	full := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("1m"), corev1.ResourceMemory: q("1Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1m"), corev1.ResourceMemory: q("1Mi")},
	}
	m := member("m", "")
	p := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: full}}}}
	place := &kobev1.Placement{
		NodeSelector: map[string]string{"role": "members"}, PriorityClassName: "p",
		Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
	}
	data := map[string][]byte{KeyServingCert: nil, KeyClientCAKey: nil, KeyAdminKubeconfig: nil, KeySAKey: nil}
	for _, f := range []string{NodeConfigFile, NodeKubeletKubeconfig, NodeKubeProxyKubeconfig, NodeKubeletCert, NodeKubeletKey, NodeClientCACert, NodeOverlayKey} {
		data[nodeKey(0, f)] = []byte("x")
	}
	if err := finishPod(kobev1.BackendKubernetes, m, &p, 3, Settings{Placement: place}, data, ""); err != nil {
		t.Fatal(err)
	}
	if p.Name != "kobe-m-server-3" || p.Namespace != "kobe" || p.Labels[LabelComponent] != "control-plane" {
		t.Errorf("meta %+v", p.ObjectMeta)
	}
	if p.Spec.NodeSelector["role"] != "members" || p.Spec.PriorityClassName != "p" || len(p.Spec.Tolerations) != 1 {
		t.Errorf("placement %+v", p.Spec)
	}
	if len(p.Spec.TopologySpreadConstraints) != 1 || p.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels[kobev1.LabelPool] != "ci" {
		t.Errorf("spread %+v", p.Spec.TopologySpreadConstraints)
	}
	var keys []string
	for _, it := range p.Spec.Volumes[0].Secret.Items {
		keys = append(keys, it.Key)
	}
	if strings.Join(keys, ",") != KeyServingCert+","+KeySAKey {
		t.Errorf("mounted keys %v, want the serving certificate and SA key only (no node's)", keys)
	}
	placed := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: full}}}}
	if err := finishPod(kobev1.BackendKubernetes, m, &placed, 0, Settings{FilePaths: map[string]string{KeySAKey: "keys/sa.key"}}, data, ""); err != nil {
		t.Fatal(err)
	}
	for _, it := range placed.Spec.Volumes[0].Secret.Items {
		if want := map[string]string{KeySAKey: "keys/sa.key"}[it.Key]; want != "" && it.Path != want || want == "" && it.Path != it.Key {
			t.Errorf("item %s at %s", it.Key, it.Path)
		}
	}

	// A node pod keeps its privilege, gets its own files only, and is
	// spread among node pods.
	nodes := []string{NodePodName(m, 0)}
	np := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node", Resources: full,
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}}
	np.Name, np.Labels = nodes[0], map[string]string{LabelComponent: ComponentNode}
	if err := finishPod(kobev1.BackendKubernetes, m, &np, 1, Settings{Placement: place, Nodes: nodes}, data, ""); err != nil {
		t.Fatal(err)
	}
	if np.Name != "kobe-m-node-0" || np.Labels[LabelComponent] != ComponentNode || np.Labels[LabelMemberUID] != "uid-1" || np.Spec.SecurityContext != nil ||
		!*np.Spec.Containers[0].SecurityContext.Privileged || *np.Spec.AutomountServiceAccountToken {
		t.Errorf("node pod %+v", np)
	}
	var nodeFiles []string
	for _, it := range np.Spec.Volumes[0].Secret.Items {
		nodeFiles = append(nodeFiles, it.Key+"="+it.Path)
	}
	if want := "node-0-node.json=node.json,node-0-kubelet.kubeconfig=kubelet.kubeconfig,node-0-kube-proxy.kubeconfig=kube-proxy.kubeconfig," +
		"node-0-kubelet.crt=kubelet.crt,node-0-kubelet.key=kubelet.key,node-0-client-ca.crt=client-ca.crt,node-0-overlay.key=overlay.key"; strings.Join(nodeFiles, ",") != want {
		t.Errorf("node pod files %v", nodeFiles)
	}
	if sc := np.Spec.TopologySpreadConstraints; len(sc) != 1 || sc[0].LabelSelector.MatchLabels[LabelComponent] != ComponentNode {
		t.Errorf("node pod spread %+v", sc)
	}
	stray := np.DeepCopy()
	stray.Name = NodePodName(m, 1)
	if err := finishPod(kobev1.BackendKubernetes, m, stray, 2, Settings{Placement: place, Nodes: []string{nodes[0], NodePodName(m, 1)}}, data, ""); err == nil {
		t.Error("node pod 1 was given files the Secret does not hold")
	}
	if err := finishPod(kobev1.BackendKubernetes, m, stray, 2, Settings{Placement: place, Nodes: nodes}, data, ""); err == nil {
		t.Error("a node pod that is not among the template's nodes was accepted")
	}
	if *p.Spec.AutomountServiceAccountToken || !*p.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("pod security %+v", p.Spec.SecurityContext)
	}

	place.SpreadAcrossNodes = ptr.To(false)
	p2 := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: full}}}}
	if err := finishPod(kobev1.BackendKubernetes, m, &p2, 0, Settings{Placement: place}, nil, ""); err != nil || len(p2.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("spreadAcrossNodes false: %v %v", err, p2.Spec.TopologySpreadConstraints)
	}

	for _, drop := range []func(*corev1.ResourceRequirements){
		func(r *corev1.ResourceRequirements) { delete(r.Requests, corev1.ResourceCPU) },
		func(r *corev1.ResourceRequirements) { delete(r.Limits, corev1.ResourceMemory) },
	} {
		r := *full.DeepCopy()
		drop(&r)
		bad := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: r}}}}
		if err := finishPod(kobev1.BackendKubernetes, m, &bad, 0, Settings{}, nil, ""); err == nil {
			t.Errorf("a container with %v was accepted", r)
		}
	}
}

func TestPDB(t *testing.T) {
	pdb := renderPDB(kobev1.BackendKubernetes, member("m", ""), 3)
	if pdb.Spec.MinAvailable.IntVal != 3 || pdb.Spec.MaxUnavailable != nil || *pdb.Spec.UnhealthyPodEvictionPolicy != "AlwaysAllow" {
		t.Errorf("PDB %+v", pdb.Spec)
	}
}

func pod(name string, mut func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}}
	if mut != nil {
		mut(&p)
	}
	return p
}

func TestJudgePods(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	b := &Backend{opts: Options{UnschedulableTimeout: time.Minute, Now: func() time.Time { return now }}}
	m := member("m", "")
	p0, n0 := podName(m, 0), NodePodName(m, 0)
	unsched := func(ago time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes", LastTransitionTime: metav1.NewTime(now.Add(-ago))}}
		}
	}
	waiting := func(reason string, restarts int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-apiserver", RestartCount: restarts,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
		}
	}
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		created int
		want    backend.State // "" = Ready (not done)
		msg     string
		nodes   []string
	}{
		{"nothing created yet", nil, 0, backend.StateProvisioning, "creating", nil},
		{"created pods not recorded yet", []corev1.Pod{pod(p0, nil)}, 0, backend.StateProvisioning, "creating the member's pods", nil},
		{"ready", []corev1.Pod{pod(p0, nil)}, 1, "", "", nil},
		{"pod gone", nil, 1, backend.StateFailed, "is gone", nil},
		{"pod being deleted", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now)) })}, 1, backend.StateFailed, "being deleted", nil},
		{"pod failed", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "Evicted" })}, 1, backend.StateFailed, "Evicted", nil},
		{"pod succeeded", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })}, 1, backend.StateFailed, "Succeeded", nil},
		{"not ready", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse })}, 1, backend.StateProvisioning, "not Ready", nil},
		{"pending", []corev1.Pod{pod(p0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })}, 1, backend.StateProvisioning, "Pending", nil},
		{"unschedulable for a while", []corev1.Pod{pod(p0, unsched(30*time.Second))}, 1, backend.StateProvisioning, "unschedulable: 0/3 nodes", nil},
		{"unschedulable too long", []corev1.Pod{pod(p0, unsched(2*time.Minute))}, 1, backend.StateFailed, "unschedulable for more than 1m0s: 0/3 nodes", nil},
		{"image never pulled", []corev1.Pod{pod(p0, waiting("ErrImageNeverPull", 0))}, 1, backend.StateFailed, "ErrImageNeverPull", nil},
		{"crash loop, early", []corev1.Pod{pod(p0, waiting("CrashLoopBackOff", 1))}, 1, backend.StateProvisioning, "not Ready", nil},
		{"crash loop", []corev1.Pod{pod(p0, waiting("CrashLoopBackOff", 3))}, 1, backend.StateFailed, "CrashLoopBackOff", nil},
		{"second of two gone", []corev1.Pod{pod(p0, nil)}, 2, backend.StateFailed, podName(m, 1) + " is gone", nil},
		{"control plane and node ready", []corev1.Pod{pod(p0, nil), pod(n0, nil)}, 2, "", "", []string{n0}},
		{"node pod gone", []corev1.Pod{pod(p0, nil)}, 2, backend.StateFailed, "node pod " + n0 + " is gone", []string{n0}},
		{"control plane gone, node pod there", []corev1.Pod{pod(n0, nil)}, 2, backend.StateFailed, "control-plane pod " + p0 + " is gone", []string{n0}},
		{"node pod ended", []corev1.Pod{pod(p0, nil), pod(n0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })}, 2, backend.StateFailed, "ended Failed", []string{n0}},
		{"node pod pending", []corev1.Pod{pod(p0, nil), pod(n0, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })}, 2, backend.StateProvisioning, n0 + " is Pending", []string{n0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, done := b.judgePods(m, tc.pods, tc.created, tc.nodes)
			if tc.want == "" {
				if done {
					t.Fatalf("got %+v, want Ready", obs)
				}
				return
			}
			if !done || obs.State != tc.want || !strings.Contains(obs.Message, tc.msg) {
				t.Errorf("got %v %+v, want %s containing %q", done, obs, tc.want, tc.msg)
			}
		})
	}
}
