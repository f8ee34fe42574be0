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
)

// hostBound is implemented by backends whose members live on the
// operator's own host (the local backend): processes of this boot, files on
// this disk. Another host's operator sees nothing of them, and would take a
// running member for a dead one and report destroyed one it never touched.
type hostBound interface {
	// Host names this host and boot, e.g. "<hostname>/<boot id>".
	Host() string
}

// hostCheck is what the host guard found.
type hostCheck int

const (
	// hostHere: the member is this host's (or its backend is not host-bound).
	hostHere hostCheck = iota
	// hostUnrecorded: a member of a host-bound backend with no host recorded.
	hostUnrecorded
	// hostElsewhere: the member was started on another host.
	hostElsewhere
)

// checkHost decides whether this operator may act on inst through b.
func checkHost(inst *kobev1.ClusterInstance, b any) (hostCheck, string) {
	hb, ok := b.(hostBound)
	if !ok {
		return hostHere, ""
	}
	switch recorded := inst.Annotations[kobev1.AnnotationHost]; recorded {
	case hb.Host():
		return hostHere, ""
	case "":
		return hostUnrecorded, ""
	default:
		return hostElsewhere, fmt.Sprintf("the member was started on host %q; this operator runs on %q and can neither observe nor destroy it: "+
			"run the operator there, or, once its processes and data there are gone, remove the finalizer %s", recorded, hb.Host(), kobev1.FinalizerInstance)
	}
}

// guardHost runs before any call to the member's backend. A member with no
// host recorded gets this host's, before anything of it is started (a
// member made before the record existed is taken to be this host's). A
// member recorded on another host is never passed to the backend: it is
// marked HostMismatch (condition and Event), and, unless its holder uses
// it, recycled, so that it is never handed out again; its finalizer then
// stays until someone removes it, since nothing here destroyed it.
// refused, when not empty, says why the reconcile must not call the backend.
func (r *Reconciler) guardHost(ctx context.Context, s *scope) (refused string, err error) {
	check, msg := checkHost(s.inst, s.backend)
	switch check {
	case hostHere:
		return "", nil
	case hostUnrecorded:
		return "", r.recordHost(ctx, s)
	}
	r.mark(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonHostMismatch, msg, corev1.EventTypeWarning)
	s.log.Info("Member was started on another host; not touching it", "recorded", s.inst.Annotations[kobev1.AnnotationHost])
	return msg, nil
}

// recordHost writes this host on the member, fenced by its resourceVersion.
func (r *Reconciler) recordHost(ctx context.Context, s *scope) error {
	before := s.inst.DeepCopy()
	metav1.SetMetaDataAnnotation(&s.inst.ObjectMeta, kobev1.AnnotationHost, s.backend.(hostBound).Host())
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
	return r.recycle(ctx, s, kobev1.ReasonHostMismatch, why, false)
}
