package pool

import (
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// RealNodes is how many real nodes each member built with this backend
// spec has (backend.local.nodes or backend.kubernetes.nodes); 0 when none
// or unset. A member's spec always carries the count the pool resolved
// (WithDefaultNodes), so unset on a member means an API-only member. A kwok
// node (backend.local.scheduling) is not a real node.
func RealNodes(b kobev1.BackendSpec) int32 {
	return ptr.Deref(nodesField(b), 0)
}

// nodesField is the backend's nodes field, nil when unset or when the
// backend has none.
func nodesField(b kobev1.BackendSpec) *int32 {
	switch {
	case b.Type == kobev1.BackendLocal && b.Local != nil:
		return b.Local.Nodes
	case b.Type == kobev1.BackendKubernetes && b.Kubernetes != nil:
		return b.Kubernetes.Nodes
	}
	return nil
}

// MemberGates returns the readiness gates a member with this many real
// nodes, of a pool with these spec.readinessGates, must pass:
// kobev1.EffectiveGates, plus NodesReady and DNSHealthy, after the pool's
// own, when it has real nodes and the pool does not list them. A member
// with real nodes is never handed out before a pod has started on each of
// them and its cluster DNS has answered a pod.
func MemberGates(nodes int32, spec []kobev1.ReadinessGate) []kobev1.ReadinessGate {
	out := kobev1.EffectiveGates(spec)
	if nodes == 0 {
		return out
	}
	for _, t := range []string{kobev1.GateNodesReady, kobev1.GateDNSHealthy} {
		if !kobev1.HasGate(out, t) {
			out = append(out, kobev1.ReadinessGate{Type: t})
		}
	}
	return out
}
