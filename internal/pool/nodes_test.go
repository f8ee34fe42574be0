package pool

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestWithDefaultNodes(t *testing.T) {
	one := NodeDefault{Count: 1}
	none := NodeDefault{Why: "the operator is not root"}
	localSpec := func(l *kobev1.LocalBackendSpec) kobev1.BackendSpec {
		return kobev1.BackendSpec{Type: kobev1.BackendLocal, Local: l}
	}
	cases := []struct {
		name    string
		backend kobev1.BackendSpec
		def     NodeDefault
		want    *int32
	}{
		{"local without a local block gets the default", localSpec(nil), one, ptr.To[int32](1)},
		{"local, nodes unset, gets the default", localSpec(&kobev1.LocalBackendSpec{}), NodeDefault{Count: 2}, ptr.To[int32](2)},
		{"an explicit 0 stays 0", localSpec(&kobev1.LocalBackendSpec{Nodes: ptr.To[int32](0)}), one, ptr.To[int32](0)},
		{"an explicit count is kept", localSpec(&kobev1.LocalBackendSpec{Nodes: ptr.To[int32](3)}), one, ptr.To[int32](3)},
		{"scheduling (a kwok node) gets no real node", localSpec(&kobev1.LocalBackendSpec{Scheduling: true}), one, nil},
		{"a default of none leaves it unset", localSpec(nil), none, nil},
		{"kubernetes without a block gets the default", kobev1.BackendSpec{Type: kobev1.BackendKubernetes}, one, ptr.To[int32](1)},
		{"kubernetes explicit 0", kobev1.BackendSpec{Type: kobev1.BackendKubernetes, Kubernetes: &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](0)}}, one, ptr.To[int32](0)},
		{"sim has no nodes", kobev1.BackendSpec{Type: kobev1.BackendSim}, one, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.backend.DeepCopy()
			got := nodesField(WithDefaultNodes(tc.backend, tc.def))
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("nodes = %v, want %v", ptr.Deref(got, -1), ptr.Deref(tc.want, -1))
			}
			if !equalBackend(*before, tc.backend) {
				t.Error("the pool's own spec was changed")
			}
		})
	}
}

func equalBackend(a, b kobev1.BackendSpec) bool {
	return TemplateHash(&kobev1.ClusterPoolSpec{Backend: a}) == TemplateHash(&kobev1.ClusterPoolSpec{Backend: b})
}

// The template hash identifies the members a pool builds: what resolves
// to the same member hashes alike, and a default that changes (the
// operator can now run nodes) replaces the members.
func TestDefaultNodesInTheTemplate(t *testing.T) {
	withNodes := func(n *int32) func(*kobev1.ClusterPool) {
		return func(p *kobev1.ClusterPool) { p.Spec.Backend.Local = &kobev1.LocalBackendSpec{Nodes: n} }
	}
	hash := func(p *kobev1.ClusterPool, def NodeDefault) string {
		return Decide(Input{Pool: p, Wired: local, Now: now, DefaultNodes: def}).TemplateHash
	}
	unset, zero, one := testPool(), testPool(withNodes(ptr.To[int32](0))), testPool(withNodes(ptr.To[int32](1)))
	cannot, can := NodeDefault{Why: "not root"}, NodeDefault{Count: 1}

	if hash(unset, cannot) != TemplateHash(&unset.Spec) {
		t.Error("a pool without nodes changed its hash where nodes cannot run: every existing member would be replaced")
	}
	if hash(zero, can) != hash(testPool(withNodes(nil)), cannot) {
		t.Error("nodes: 0 and an unset nodes that resolves to 0 build the same member but hash differently")
	}
	if hash(unset, can) != hash(one, cannot) {
		t.Error("an unset nodes that resolves to 1 and nodes: 1 build the same member but hash differently")
	}
	if hash(unset, can) == hash(unset, cannot) {
		t.Error("the resolved default is not part of the template: members without nodes would never be replaced")
	}

	plan := Decide(Input{Pool: unset, Wired: local, Now: now, DefaultNodes: can})
	if len(plan.Create) == 0 || RealNodes(plan.MemberBackend) != 1 || plan.MemberBackend.Local.Nodes == nil {
		t.Fatalf("plan creates %v with backend %+v, want members with 1 node", plan.Create, plan.MemberBackend)
	}
	if unset.Spec.Backend.Local != nil {
		t.Error("Decide wrote the default into the pool's own spec")
	}
}

func TestNodesCondition(t *testing.T) {
	cases := []struct {
		name    string
		mut     func(*kobev1.ClusterPool)
		def     NodeDefault
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"default 1", nil, NodeDefault{Count: 1}, metav1.ConditionTrue, kobev1.ReasonNodesRun,
			"each member has 1 node(s): backend.local.nodes is unset, this operator's default"},
		{"explicit 2", func(p *kobev1.ClusterPool) { p.Spec.Backend.Local = &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](2)} },
			NodeDefault{Why: "x"}, metav1.ConditionTrue, kobev1.ReasonNodesRun, "each member has 2 node(s) (backend.local.nodes)"},
		{"explicit 0", func(p *kobev1.ClusterPool) { p.Spec.Backend.Local = &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](0)} },
			NodeDefault{Count: 1}, metav1.ConditionFalse, kobev1.ReasonNodesNotRequested, "API-only members (backend.local.nodes: 0)"},
		{"scheduling", func(p *kobev1.ClusterPool) { p.Spec.Backend.Local = &kobev1.LocalBackendSpec{Scheduling: true} },
			NodeDefault{Count: 1}, metav1.ConditionFalse, kobev1.ReasonNodesNotRequested, "simulated node"},
		{"the operator cannot", nil, NodeDefault{Why: "members with nodes need the operator to run as root"},
			metav1.ConditionFalse, kobev1.ReasonNodesUnavailable,
			"members have no node, so their pods never run: members with nodes need the operator to run as root; set backend.local.nodes: 0 to ask for API-only members"},
		{"kubernetes names its field", func(p *kobev1.ClusterPool) { p.Spec.Backend = kobev1.BackendSpec{Type: kobev1.BackendKubernetes} },
			NodeDefault{Why: "this operator's --kubernetes-default-nodes is 0"}, metav1.ConditionFalse, kobev1.ReasonNodesUnavailable,
			"set backend.kubernetes.nodes: 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var muts []func(*kobev1.ClusterPool)
			if tc.mut != nil {
				muts = append(muts, tc.mut)
			}
			p := testPool(muts...)
			wired := []kobev1.BackendType{p.Spec.Backend.Type}
			c := meta.FindStatusCondition(Decide(Input{Pool: p, Wired: wired, Now: now, DefaultNodes: tc.def}).Conditions, kobev1.ConditionNodes)
			if c == nil {
				t.Fatal("no Nodes condition")
			}
			if c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Errorf("Nodes = %s/%s %q, want %s/%s containing %q", c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
			}
		})
	}
	sim := testPool(func(p *kobev1.ClusterPool) { p.Spec.Backend.Type = kobev1.BackendSim })
	if c := meta.FindStatusCondition(Decide(Input{Pool: sim, Wired: []kobev1.BackendType{kobev1.BackendSim}, Now: now}).Conditions, kobev1.ConditionNodes); c != nil {
		t.Errorf("a sim pool has a Nodes condition: %+v", c)
	}
}
