package clusterpool

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// finalize deletes the pool's members that no lease holds and keeps the
// pool until they are gone; no garbage collector is relied on. A bound
// member is left to its lease (the binder made the lease its owner).
func (r *Reconciler) finalize(ctx context.Context, s *scope) (ctrl.Result, error) {
	p := s.pool
	if !controllerutil.ContainsFinalizer(p, kobev1.FinalizerPool) {
		return ctrl.Result{}, nil
	}
	if err := r.decide(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.setStatus(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	members, err := r.members(ctx, p, r.APIReader)
	if err != nil {
		return ctrl.Result{}, err
	}
	var unbound, toDelete []kobev1.ClusterInstance
	for _, m := range members {
		if m.Spec.LeaseRef != nil {
			continue
		}
		unbound = append(unbound, m)
		if m.DeletionTimestamp.IsZero() {
			toDelete = append(toDelete, m)
		}
	}
	if _, err := r.deleteMembers(ctx, p, toDelete, "the pool is being deleted"); err != nil {
		return ctrl.Result{}, err
	}
	if len(unbound) > 0 {
		// Their deletion events bring us back; the poll is a safety net.
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	if b, ok := r.Backends.For(p.Spec.Backend.Type); ok {
		if f, ok := b.(backend.PoolForgetter); ok {
			if err := f.ForgetPool(p.Namespace, func(name string) bool { return pool.IsMemberName(p.Name, name) }); err != nil {
				return ctrl.Result{}, fmt.Errorf("forgetting what the backend keeps of the pool: %w", err)
			}
		}
	}
	if err := s.patch.RemoveFinalizer(ctx, kobev1.FinalizerPool); err != nil || !s.patch.Gone() {
		return ctrl.Result{}, err
	}
	metrics.DeletePool(p.Namespace, p.Name)
	r.expected.forget(p.UID)
	ctrl.LoggerFrom(ctx).Info("Pool cleaned up")
	return ctrl.Result{}, nil
}
