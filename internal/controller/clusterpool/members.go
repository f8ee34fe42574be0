package clusterpool

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// reserveOrdinals records status.nextOrdinal before any member uses the new
// ordinals, fenced by the pool's resourceVersion: a pool read from a lagging
// cache conflicts instead of handing an ordinal out twice.
func (r *Reconciler) reserveOrdinals(ctx context.Context, p *kobev1.ClusterPool, next int32) error {
	if next <= p.Status.NextOrdinal {
		return nil
	}
	before := p.DeepCopy()
	p.Status.NextOrdinal = next
	if err := r.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("reserving ordinals up to %d: %w", next, err)
	}
	return nil
}

// createMembers creates the planned members.
func (r *Reconciler) createMembers(ctx context.Context, p *kobev1.ClusterPool, plan pool.Plan) error {
	for _, n := range plan.Create {
		m := pool.NewMember(p, n)
		if err := r.Client.Create(ctx, m); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return fmt.Errorf("creating member %s: %w", m.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Member created", "member", m.Name)
		r.event(p, m, corev1.EventTypeNormal, kobev1.EventMemberCreated, "Create",
			"created member %s to keep %d members Ready or Creating", m.Name, plan.Target)
	}
	return nil
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
		ctrl.LoggerFrom(ctx).Info("Member deleted", "member", m.Name, "why", why)
		r.event(p, m, corev1.EventTypeNormal, kobev1.EventMemberDeleted, "Delete", "deleted member %s (%s): %s", m.Name, m.Status.Phase, why)
	}
	return raced, nil
}
