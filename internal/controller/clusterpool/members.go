package clusterpool

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// reserveOrdinals records status.nextOrdinal before any member uses the new
// ordinals, fenced by the pool's resourceVersion: a pool read from a lagging
// cache goes stale (and decides again) instead of handing an ordinal out
// twice.
func (r *Reconciler) reserveOrdinals(ctx context.Context, s *scope) error {
	if s.plan.NextOrdinal <= s.pool.Status.NextOrdinal {
		return nil
	}
	s.pool.Status.NextOrdinal = s.plan.NextOrdinal
	if err := s.patch.Status(ctx); err != nil {
		return fmt.Errorf("reserving ordinals up to %d: %w", s.plan.NextOrdinal, err)
	}
	return nil
}

// createMembers creates the planned members.
func (r *Reconciler) createMembers(ctx context.Context, s *scope) error {
	p, plan := s.pool, s.plan
	for _, n := range plan.Create {
		m := pool.NewMember(p, n, plan.TemplateHash)
		m.Spec.Backend = *plan.MemberBackend.DeepCopy()
		if err := r.Client.Create(ctx, m); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return fmt.Errorf("creating member %s: %w", m.Name, err)
		}
		r.expected.expect(p.UID, []string{m.Name}, nil, s.conds.Now)
		if s.host.Max > 0 {
			r.host.record(m.UID, p.Spec.Backend.Type, s.conds.Now)
		}
		// No Event: creating members is the pool's routine, and each
		// Event is a write on the host's API server.
		ctrl.LoggerFrom(ctx).Info("Member created", "member", m.Name, "target", plan.Target)
	}
	return nil
}

// scaleDown deletes the unbound members the plan removes: Ready ones the
// pool no longer wants or replaces, Creating ones of an older template. A
// member that changed meanwhile (bound, probed) is left alone and the pool
// decides again in a second.
func (r *Reconciler) scaleDown(ctx context.Context, s *scope) (ctrl.Result, error) {
	if len(s.plan.Delete) == 0 {
		return ctrl.Result{RequeueAfter: s.plan.RequeueAfter}, nil
	}
	// A removal is decided from the pool's status too (lastPressure, which
	// scale-down waits on): a pool read from a lagging cache must not
	// delete, so the pool is read live first and a newer one decides again.
	live := &kobev1.ClusterPool{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.pool), live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if live.ResourceVersion != s.pool.ResourceVersion {
		s.patch.MarkStale()
		return ctrl.Result{}, nil
	}
	raced := false
	for _, rm := range s.plan.Delete {
		lost, err := r.deleteMember(ctx, s.pool, &rm.Member, rm.Reason, rm.Why)
		if err != nil {
			return ctrl.Result{}, err
		}
		raced = raced || lost
	}
	if raced {
		ctrl.LoggerFrom(ctx).Info("A member changed before its deletion; deciding again", "after", time.Second)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: s.plan.RequeueAfter}, nil
}

// deleteMembers deletes members for one reason (the pool's deletion).
func (r *Reconciler) deleteMembers(ctx context.Context, p *kobev1.ClusterPool, members []kobev1.ClusterInstance, why string) (raced bool, err error) {
	for i := range members {
		lost, err := r.deleteMember(ctx, p, &members[i], kobev1.ReasonPoolDeleted, why)
		if err != nil {
			return raced, err
		}
		raced = raced || lost
	}
	return raced, nil
}

// deleteMember deletes m fenced by its UID and resourceVersion, so that a
// member bound to a lease since it was read is never deleted: its bind
// changed its resourceVersion. raced reports a member that changed or is
// gone. The event and the log say why (reason: ScaledDown, Outdated,
// IdleExpired, PoolDeleted).
func (r *Reconciler) deleteMember(ctx context.Context, p *kobev1.ClusterPool, m *kobev1.ClusterInstance, reason, why string) (raced bool, err error) {
	uid, rv := m.UID, m.ResourceVersion
	err = r.Client.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("deleting member %s (%s): %w", m.Name, reason, err)
	}
	r.expected.expect(p.UID, nil, []string{m.Name}, r.Clock.Now())
	ctrl.LoggerFrom(ctx).Info("Member deleted", "member", klog.KObj(m), "phase", m.Status.Phase, "reason", reason, "why", why)
	return false, nil
}
