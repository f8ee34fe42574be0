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
	// GateDNSHealthy: the member's cluster DNS answers its pods. For a
	// member with real nodes it is always evaluated, after NodesReady: the
	// operator creates CoreDNS in kube-system if it is missing, waits for
	// it to roll out, and a probe pod resolves a Service by its short and
	// full names. A member without real nodes has no cluster DNS and never
	// passes it.
	GateDNSHealthy = "DNSHealthy"
	// GateCRDExists: the CustomResourceDefinition of the gate's crd exists
	// in the member and is Established.
	GateCRDExists = "CRDExists"
	// GateDeploymentReady: the Deployment of the gate's deployment exists
	// in the member and has rolled out: its controller observed the latest
	// spec, every replica is updated and available.
	GateDeploymentReady = "DeploymentReady"
	// GateURLHealthy: GET of the gate's url answers with a 2xx status.
	GateURLHealthy = "URLHealthy"
	// GateBootstrapsComplete: every BootstrapConfig the pool names is
	// applied (the instance's BootstrapsComplete condition is True). A pool
	// with bootstraps always waits for it; listing it is for the record.
	GateBootstrapsComplete = "BootstrapsComplete"
	// GateAddonsReady is GateBootstrapsComplete under the name the spec's
	// documents use.
	GateAddonsReady = "AddonsReady"
)

// AlwaysGates returns the gates evaluated for every member whether or not the
// pool lists them: a member whose API server does not answer, or whose
// ServiceAccount tokens do not work, is never handed out.
func AlwaysGates() []string {
	return []string{GateAPIServerReachable, GateInClusterToken}
}

// BuiltinGates returns every gate type the operator evaluates itself.
func BuiltinGates() []string {
	return []string{GateAPIServerReachable, GateInClusterToken, GateDefaultServiceAccount, GateNodesReady,
		GateDNSHealthy, GateCRDExists, GateDeploymentReady, GateURLHealthy, GateBootstrapsComplete, GateAddonsReady}
}

// IsBuiltinGate reports whether the operator evaluates gate type t itself;
// any other type is read from the ClusterInstance's conditions.
func IsBuiltinGate(t string) bool { return slices.Contains(BuiltinGates(), t) }

// EffectiveGates returns the gates a member of a pool with these
// spec.readinessGates must pass: AlwaysGates first, then the pool's gates in
// their order, without duplicate keys.
func EffectiveGates(spec []ReadinessGate) []ReadinessGate {
	out := make([]ReadinessGate, 0, len(spec)+2)
	for _, t := range AlwaysGates() {
		out = append(out, ReadinessGate{Type: t})
	}
	for _, g := range spec {
		if !HasGate(out, g.Key()) {
			out = append(out, g)
		}
	}
	return out
}

// HasGate reports whether gates hold one with this key.
func HasGate(gates []ReadinessGate, key string) bool {
	return slices.ContainsFunc(gates, func(g ReadinessGate) bool { return g.Key() == key })
}

// GateKeys returns the keys of gates, in order.
func GateKeys(gates []ReadinessGate) []string {
	out := make([]string, len(gates))
	for i, g := range gates {
		out[i] = g.Key()
	}
	return out
}

// GatesOfTypes returns an unnamed gate of each type, for the gates that take
// no parameters.
func GatesOfTypes(types ...string) []ReadinessGate {
	out := make([]ReadinessGate, len(types))
	for i, t := range types {
		out[i] = ReadinessGate{Type: t}
	}
	return out
}
