package clusterinstance

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// watchLeased asks the backend about a leased member every health
// interval. A member that died while leased (the backend reports it Failed,
// or nothing of it left) is recycled with reason InstanceLost; its lease
// then ends with that reason (the lease controller) instead of pointing at
// a dead cluster until it expires. Only the backend's verdict counts: a
// failing /readyz may be the holder's own doing (a heavy test, a restarted
// API server), and must not take a cluster away from its holder.
func (r *Reconciler) watchLeased(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.simulated() {
		// A simulated member's fate is fixed by its UID before it is ever
		// Ready (sim.Fails): there is nothing to watch, and a requeue per
		// leased member and interval would cost the benchmarks for nothing.
		return ctrl.Result{}, nil
	}
	obs, err := s.backend.Observe(ctx, s.member())
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("observing leased member %s: %w", s.inst.Name, err)
	}
	if lost, why := leasedMemberLost(obs); lost {
		return r.recycle(ctx, s, kobev1.ReasonInstanceLost, why)
	}
	return ctrl.Result{RequeueAfter: s.settings.interval}, nil
}

// leasedMemberLost decides from the backend's observation whether a leased
// member is dead for good, and says why.
func leasedMemberLost(obs backend.Observation) (bool, string) {
	switch obs.State {
	case backend.StateFailed:
		return true, "the backend reports the member failed while leased: " + obs.Message
	case backend.StateAbsent:
		return true, "the backend reports nothing of the member exists while leased"
	}
	return false, ""
}
