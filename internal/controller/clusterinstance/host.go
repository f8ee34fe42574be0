package clusterinstance

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// guardHost runs before any call to the member's backend. A member with no
// host recorded gets this host's, before anything of it is started (a
// member made before the record existed is taken to be this host's). A
// member recorded on another host is never passed to the backend: it is
// marked HostMismatch (condition and Event), and, unless its holder uses
// it, recycled, so that it is never handed out again; its finalizer then
// stays until someone removes it, since nothing here destroyed it.
// refused, when not empty, says why the reconcile must not call the backend.
func (r *Reconciler) guardHost(ctx context.Context, s *scope) (refused string, err error) {
	check, msg := backend.CheckHost(s.inst, s.backend)
	switch check {
	case backend.HostHere:
		return "", nil
	case backend.HostUnrecorded:
		return "", r.recordHost(ctx, s)
	}
	r.mark(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonHostMismatch, msg, corev1.EventTypeWarning)
	s.log.Info("Member was started on another host; not touching it", "recorded", s.inst.Annotations[kobev1.AnnotationHost])
	return msg, nil
}

// recordHost writes this host on the member, fenced by its resourceVersion.
func (r *Reconciler) recordHost(ctx context.Context, s *scope) error {
	before := s.inst.DeepCopy()
	metav1.SetMetaDataAnnotation(&s.inst.ObjectMeta, kobev1.AnnotationHost, s.backend.(backend.HostBound).Host())
	if err := r.Client.Patch(ctx, s.inst, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("recording the host of member %s: %w", s.inst.Name, err)
	}
	s.patch.Snapshot()
	return nil
}

// elsewhereRecheck is how often a member on another host is looked at again
// (its record may be corrected, its lease may end).
const elsewhereRecheck = time.Minute

// reconcileElsewhere handles a member started on another host without
// calling its backend: one its lease still holds is left to its holder
// (unobserved); any other is recycled, so that it is never handed out.
func (r *Reconciler) reconcileElsewhere(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	switch s.inst.Status.Phase {
	case kobev1.InstanceRecycling:
		return r.deleteInstance(ctx, s)
	case kobev1.InstanceQuarantined:
		return ctrl.Result{RequeueAfter: elsewhereRecheck}, nil
	}
	if s.inst.Spec.LeaseRef != nil {
		state, _, err := r.lookupLease(ctx, s)
		if err != nil || state == leaseActive {
			return ctrl.Result{RequeueAfter: elsewhereRecheck}, err
		}
	}
	return r.recycle(ctx, s, kobev1.ReasonHostMismatch, why)
}
