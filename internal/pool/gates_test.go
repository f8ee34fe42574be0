package pool

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestMemberGates(t *testing.T) {
	local := func(l kobev1.LocalBackendSpec) kobev1.BackendSpec {
		return kobev1.BackendSpec{Type: kobev1.BackendLocal, Local: &l}
	}
	cases := []struct {
		name    string
		backend kobev1.BackendSpec
		spec    []kobev1.ReadinessGate
		want    string
	}{
		{"no nodes: the pool's gates", local(kobev1.LocalBackendSpec{}), nil, "APIServerReachable,InClusterToken"},
		{"kwok scheduling is not a real node", local(kobev1.LocalBackendSpec{Scheduling: true}), nil, "APIServerReachable,InClusterToken"},
		{"kwok keeps NodesReady when the pool lists it", local(kobev1.LocalBackendSpec{Scheduling: true}),
			[]kobev1.ReadinessGate{{Type: "NodesReady"}}, "APIServerReachable,InClusterToken,NodesReady"},
		{"local nodes add NodesReady and DNSHealthy last", local(kobev1.LocalBackendSpec{Nodes: ptr.To[int32](2)}),
			[]kobev1.ReadinessGate{{Type: "X"}}, "APIServerReachable,InClusterToken,X,NodesReady,DNSHealthy"},
		{"listed NodesReady keeps its place", local(kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}),
			[]kobev1.ReadinessGate{{Type: "NodesReady"}, {Type: "X"}}, "APIServerReachable,InClusterToken,NodesReady,X,DNSHealthy"},
		{"listed DNSHealthy keeps its place", local(kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}),
			[]kobev1.ReadinessGate{{Type: "DNSHealthy"}, {Type: "X"}}, "APIServerReachable,InClusterToken,DNSHealthy,X,NodesReady"},
		{"kubernetes nodes add NodesReady and DNSHealthy", kobev1.BackendSpec{Type: kobev1.BackendKubernetes, Kubernetes: &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](1)}},
			nil, "APIServerReachable,InClusterToken,NodesReady,DNSHealthy"},
		{"a named gate of another type called like no built-in still gets NodesReady", local(kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}),
			[]kobev1.ReadinessGate{{Type: "CRDExists", Name: "Widgets", CRD: &kobev1.CRDGate{Name: "widgets.example.com"}}}, "APIServerReachable,InClusterToken,Widgets,NodesReady,DNSHealthy"},
		{"nodes of a backend block the type does not use count for nothing",
			kobev1.BackendSpec{Type: kobev1.BackendSim, Local: &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}}, nil, "APIServerReachable,InClusterToken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(kobev1.GateKeys(MemberGates(RealNodes(tc.backend), tc.spec)), ","); got != tc.want {
				t.Errorf("MemberGates = %s, want %s", got, tc.want)
			}
		})
	}
}
