package v1alpha1

import "slices"

// Readiness gate types the operator evaluates itself against a member. They
// are API values: spec.readinessGates names them, the conditions of a
// ClusterInstance carry them as types, and the pool's Warm condition quotes
// them. Any other gate type is a ClusterInstance condition that something
// else sets to True.
const (
	// GateAPIServerReachable: GET /readyz on the member's API server succeeds.
	GateAPIServerReachable = "APIServerReachable"
	// GateInClusterToken: a token minted for the "default" ServiceAccount of
	// the "default" namespace authenticates (TokenRequest, then TokenReview).
	GateInClusterToken = "InClusterToken"
	// GateDefaultServiceAccount: the "default" ServiceAccount of the
	// "default" namespace exists (the member's controller manager runs).
	GateDefaultServiceAccount = "DefaultServiceAccount"
	// GateNodesReady: at least one node reports Ready. For a member with
	// real nodes (backend.local.nodes, backend.kubernetes.nodes) it is
	// always evaluated, and means: that many nodes Ready, and on each a
	// probe pod started and was deleted again before hand-out.
	GateNodesReady = "NodesReady"
)

// AlwaysGates returns the gates evaluated for every member whether or not the
// pool lists them: a member whose API server does not answer, or whose
// ServiceAccount tokens do not work, is never handed out.
func AlwaysGates() []string {
	return []string{GateAPIServerReachable, GateInClusterToken}
}

// BuiltinGates returns every gate type the operator evaluates itself.
func BuiltinGates() []string {
	return []string{GateAPIServerReachable, GateInClusterToken, GateDefaultServiceAccount, GateNodesReady}
}

// IsBuiltinGate reports whether the operator evaluates gate type t itself;
// any other type is read from the ClusterInstance's conditions.
func IsBuiltinGate(t string) bool { return slices.Contains(BuiltinGates(), t) }

// EffectiveGates returns the gate types a member of a pool with these
// spec.readinessGates must pass: AlwaysGates first, then the pool's gates in
// their order, without duplicates.
func EffectiveGates(spec []ReadinessGate) []string {
	out := AlwaysGates()
	for _, g := range spec {
		if !slices.Contains(out, g.Type) {
			out = append(out, g.Type)
		}
	}
	return out
}
