package clusterinstance

import (
	"context"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/gates"
)

// simulated reports whether the member's backend says its members have no
// API server behind their endpoint (backend.Capabilities.Simulated: the sim
// backend, wired only by --enable-sim-backend). Built-in readiness gates and
// health probes talk to that API server, so against a simulated member they
// could only fail: its built-in gates pass unprobed, and a Ready simulated
// member is never probed (nor requeued, nor written) until it is leased or
// deleted. Gates that are conditions set by someone else still apply.
func (s *scope) simulated() bool {
	return s.backend != nil && s.backend.Capabilities().Simulated
}

// evaluateGates runs the pool's readiness gates against the member's API
// server with its admin kubeconfig; for a simulated member, see simulated.
func (r *Reconciler) evaluateGates(ctx context.Context, s *scope) ([]gates.Result, error) {
	if !s.simulated() {
		kubeconfig, err := r.adminKubeconfig(ctx, s)
		if err != nil {
			return nil, err
		}
		return gates.EvaluateMember(ctx, kubeconfig, s.settings.gates, s.inst.Status.Conditions, gates.Options{
			Timeout: r.probeTimeout(s), Nodes: s.settings.nodes, ProbeImage: r.NodeProbeImage, Now: s.now,
		}), nil
	}
	out := make([]gates.Result, 0, len(s.settings.gates))
	for _, g := range s.settings.gates {
		if kobev1.IsBuiltinGate(g.Type) {
			out = append(out, gates.Result{Name: g.Key(), Builtin: true, Passed: true, Message: "simulated member: passed without probing"})
			continue
		}
		// An external gate is only a condition: no kubeconfig is used.
		out = append(out, gates.Evaluate(ctx, nil, []kobev1.ReadinessGate{g}, s.inst.Status.Conditions, r.probeTimeout(s))...)
	}
	return out, nil
}
