package pool

import (
	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// RealNodes is how many real nodes each member of a pool with this backend
// asks for (backend.local.nodes or backend.kubernetes.nodes); 0 when none.
// A kwok node (backend.local.scheduling) is not a real node.
func RealNodes(b kobev1.BackendSpec) int32 {
	switch {
	case b.Type == kobev1.BackendLocal && b.Local != nil:
		return b.Local.Nodes
	case b.Type == kobev1.BackendKubernetes && b.Kubernetes != nil:
		return b.Kubernetes.Nodes
	}
	return 0
}

// MemberGates returns the readiness gates a member built with backend b, of
// a pool with these spec.readinessGates, must pass: kobev1.EffectiveGates,
// plus NodesReady and DNSHealthy, after the pool's own, for a member that
// asks for real nodes when the pool does not list them. A member with real
// nodes is never handed out before a pod has started on each of them and
// its cluster DNS has answered a pod.
func MemberGates(b kobev1.BackendSpec, spec []kobev1.ReadinessGate) []kobev1.ReadinessGate {
	out := kobev1.EffectiveGates(spec)
	if RealNodes(b) == 0 {
		return out
	}
	for _, t := range []string{kobev1.GateNodesReady, kobev1.GateDNSHealthy} {
		if !kobev1.HasGate(out, t) {
			out = append(out, kobev1.ReadinessGate{Type: t})
		}
	}
	return out
}
