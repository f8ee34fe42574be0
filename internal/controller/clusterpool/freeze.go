package clusterpool

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// freezeWarm freezes and thaws the pool's warm members as pool.PlanFreeze
// decides (warm.running, plus one per lease waiting in the pool's queue),
// by writing each member's spec.frozen; the instance controller freezes,
// thaws and checks a thawed member's health before it may be handed out.
// Each write is fenced by the member's resourceVersion, so a member bound
// since the cache showed it is never asked to freeze (the CRD refuses
// frozen on a bound member as well). A pool whose backend cannot freeze
// here thaws whatever an earlier operator froze. It returns when to
// decide again.
func (r *Reconciler) freezeWarm(ctx context.Context, s *scope) (time.Duration, error) {
	b, wired := r.Backends.For(s.pool.Spec.Backend.Type)
	f, freezer := b.(backend.Freezer)
	if !wired || !freezer {
		return 0, nil
	}
	running := pool.WarmRunning(&s.pool.Spec)
	if ok, _ := f.CanFreeze(); !ok {
		running = len(s.members) // every member runs
	}
	plan := pool.PlanFreeze(pool.FreezeInput{
		Members: pool.FreezeCandidates(s.members, s.plan.TemplateHash),
		Running: running, Waiting: int(s.queue), Settle: r.FreezeSettle, Now: s.conds.Now,
	})
	byName := make(map[string]*kobev1.ClusterInstance, len(s.members))
	for i := range s.members {
		byName[s.members[i].Name] = &s.members[i]
	}
	raced := false
	for _, want := range []struct {
		frozen bool
		names  []string
	}{{false, plan.Thaw}, {true, plan.Freeze}} {
		for _, name := range want.names {
			lost, err := r.setFrozen(ctx, byName[name], want.frozen)
			if err != nil {
				return 0, err
			}
			raced = raced || lost
		}
	}
	if raced {
		// A member changed since the cache showed it (bound, probed):
		// decide again soon from what the cache shows then.
		return time.Second, nil
	}
	return plan.RequeueAfter, nil
}

// setFrozen writes m's spec.frozen, fenced by its resourceVersion. lost
// reports a member that changed or went meanwhile.
func (r *Reconciler) setFrozen(ctx context.Context, m *kobev1.ClusterInstance, frozen bool) (lost bool, err error) {
	if m == nil || m.Spec.Frozen == frozen {
		return false, nil
	}
	if frozen && m.Spec.LeaseRef != nil {
		return false, nil // never; PlanFreeze freezes no bound member
	}
	m = m.DeepCopy()
	m.Spec.Frozen = frozen
	switch err := r.Client.Update(ctx, m); {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err):
		// Invalid: bound meanwhile (the CRD refuses frozen on a bound member).
		return true, nil
	case err != nil:
		return false, fmt.Errorf("setting member %s frozen=%t: %w", m.Name, frozen, err)
	}
	// No Event: freezing is the pool's routine.
	ctrl.LoggerFrom(ctx).V(1).Info("Member freeze asked", "member", m.Name, "frozen", frozen)
	return false, nil
}
