package clusterpool

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		m := pool.NewMember(p, n)
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
		ctrl.LoggerFrom(ctx).Info("Member created", "member", m.Name)
		r.event(p, m, corev1.EventTypeNormal, kobev1.EventMemberCreated, "Create",
			"created member %s to keep %d members Ready or Creating", m.Name, plan.Target)
	}
	return nil
}

// scaleDown deletes the Ready, unbound members the pool no longer wants. A
// member that changed meanwhile (bound, probed) is left alone and the pool
// decides again in a second.
func (r *Reconciler) scaleDown(ctx context.Context, s *scope) (ctrl.Result, error) {
	why := fmt.Sprintf("scaled down: the pool wants %d Ready or Creating members", s.plan.Target)
	raced, err := r.deleteMembers(ctx, s.pool, s.plan.Delete, why)
	if err != nil {
		return ctrl.Result{}, err
	}
	if raced {
		ctrl.LoggerFrom(ctx).Info("A member changed before its deletion; deciding again", "after", time.Second)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: s.plan.RequeueAfter}, nil
}

// deleteMembers deletes members fenced by their UID and resourceVersion, so
// that a member bound to a lease since it was read is never deleted: its
// bind changed its resourceVersion. raced reports a member that changed.
func (r *Reconciler) deleteMembers(ctx context.Context, p *kobev1.ClusterPool, members []kobev1.ClusterInstance, why string) (raced bool, err error) {
	for i := range members {
		m := &members[i]
		uid, rv := m.UID, m.ResourceVersion
		err := r.Client.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			raced = true
			continue
		case err != nil:
			return raced, fmt.Errorf("deleting member %s: %w", m.Name, err)
		}
		r.expected.expect(p.UID, nil, []string{m.Name}, r.Clock.Now())
		ctrl.LoggerFrom(ctx).Info("Member deleted", "member", m.Name, "why", why)
		r.event(p, m, corev1.EventTypeNormal, kobev1.EventMemberDeleted, "Delete", "deleted member %s (%s): %s", m.Name, m.Status.Phase, why)
	}
	return raced, nil
}
