package clusterpool

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/metrics"
)

// finalize deletes the pool's members that no lease holds and keeps the
// pool until they are gone; no garbage collector is relied on. A bound
// member is left to its lease (the binder made the lease its owner).
func (r *Reconciler) finalize(ctx context.Context, p *kobev1.ClusterPool) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(p, kobev1.FinalizerPool) {
		return ctrl.Result{}, nil
	}
	plan, queue, err := r.plan(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := p.DeepCopy()
	r.setStatus(p, plan, queue)
	if err := r.patchStatus(ctx, before, p); err != nil {
		return ctrl.Result{}, err
	}

	members, err := r.members(ctx, p)
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

	controllerutil.RemoveFinalizer(p, kobev1.FinalizerPool)
	if err := r.Client.Update(ctx, p); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing finalizer of pool %s: %w", p.Name, err)
	}
	metrics.DeletePool(p.Namespace, p.Name)
	ctrl.LoggerFrom(ctx).Info("Pool cleaned up")
	return ctrl.Result{}, nil
}
