// Package clusterlease reconciles ClusterLeases: binds queued leases to Ready
// members in first-come-first-served order, repairs binds interrupted by a
// crash, ends leases at their expiry or queue timeout, and deletes ended
// leases after a retention period. Member destruction is the instance
// controller's job; binding itself lives in package binding.
package clusterlease

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/metrics"
)

// Reconciler reconciles ClusterLeases.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Binder    *binding.Binder
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Retention is how long an ended lease is kept (for GET and audit).
	Retention time.Duration
	// RepairGrace is how long a half-written bind is left to its binder
	// before the controller completes or undoes it.
	RepairGrace time.Duration

	// failures paces the retries of binds that keep failing.
	failures bindFailures
}

// SetupWithManager registers the controller. The index.LeasePool cache
// index must be registered on mgr (index.Setup).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("clusterlease").
		For(&kobev1.ClusterLease{}).
		// A member turning Ready may let queued leases bind; a member
		// disappearing may end the lease bound to it.
		Watches(&kobev1.ClusterInstance{}, handler.EnqueueRequestsFromMapFunc(r.leasesForInstance)).
		Complete(r)
}

func (r *Reconciler) leasesForInstance(ctx context.Context, o client.Object) []reconcile.Request {
	inst, ok := o.(*kobev1.ClusterInstance)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	if inst.Spec.LeaseRef != nil {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: inst.Namespace, Name: inst.Spec.LeaseRef.Name}})
	}
	if binding.Available(inst) {
		var ls kobev1.ClusterLeaseList
		if err := r.Client.List(ctx, &ls, client.InNamespace(inst.Namespace), client.MatchingFields{index.LeasePool: inst.Spec.PoolRef.Name}); err == nil {
			for _, l := range lease.Queue(ls.Items, inst.Spec.PoolRef.Name) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)})
			}
		}
	}
	return reqs
}

// Reconcile moves one lease along: queued -> bound -> ended -> deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	l := &kobev1.ClusterLease{}
	if err := r.Client.Get(ctx, req.NamespacedName, l); err != nil {
		if apierrors.IsNotFound(err) {
			r.failures.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !lease.IsQueued(l) {
		r.failures.forget(req.NamespacedName)
	}
	if l.DeletionTimestamp != nil {
		// The bound member sees its lease go and recycles itself.
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()

	switch {
	case lease.IsEnded(l.Status.Phase):
		return r.reconcileEnded(ctx, l, now)
	case l.Status.Phase == kobev1.LeaseBound:
		return r.reconcileBound(ctx, l, now)
	default:
		return r.reconcileQueued(ctx, l, now)
	}
}

// reconcileEnded deletes an ended lease once its retention has passed.
func (r *Reconciler) reconcileEnded(ctx context.Context, l *kobev1.ClusterLease, now time.Time) (ctrl.Result, error) {
	ended := l.CreationTimestamp.Time
	if l.Status.EndedAt != nil {
		ended = l.Status.EndedAt.Time
	}
	if left := ended.Add(r.Retention).Sub(now); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	if err := r.Client.Delete(ctx, l, client.Preconditions{UID: &l.UID}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("deleting ended lease %s: %w", l.Name, err)
	}
	return ctrl.Result{}, nil
}

// reconcileBound checks the member side of the binding and ends the lease at
// its expiry.
func (r *Reconciler) reconcileBound(ctx context.Context, l *kobev1.ClusterLease, now time.Time) (ctrl.Result, error) {
	if end := lease.CheckEnd(l, 0, now); end.End {
		return ctrl.Result{}, r.end(ctx, l, end.Phase, end.Reason, end.Message)
	}
	res, err := r.checkMember(ctx, l, now)
	if err != nil || lease.IsEnded(l.Status.Phase) || l.Status.Phase != kobev1.LeaseBound {
		return res, err
	}
	end := lease.CheckEnd(l, 0, now)
	if res.RequeueAfter == 0 || end.RecheckAfter < res.RequeueAfter {
		res.RequeueAfter = end.RecheckAfter
	}
	return res, nil
}

// checkMember verifies that the bound member points back at the lease. A
// bind interrupted between its two writes is completed (member still
// available) or undone, once the binder had RepairGrace to finish it.
func (r *Reconciler) checkMember(ctx context.Context, l *kobev1.ClusterLease, now time.Time) (ctrl.Result, error) {
	ref := l.Status.InstanceRef
	if ref == nil {
		return ctrl.Result{}, r.end(ctx, l, kobev1.LeaseExpired, kobev1.ReasonInstanceLost, "lease is bound but names no member")
	}
	key := types.NamespacedName{Namespace: l.Namespace, Name: ref.Name}
	inst := &kobev1.ClusterInstance{}
	// The cache answers the common case (both sides agree); anything else
	// is confirmed against the API server before acting on it.
	if err := r.Client.Get(ctx, key, inst); err == nil && binding.Consistent(l, inst) {
		return ctrl.Result{}, nil
	}
	err := r.APIReader.Get(ctx, key, inst)
	if apierrors.IsNotFound(err) || (err == nil && inst.UID != ref.UID) {
		return ctrl.Result{}, r.end(ctx, l, kobev1.LeaseExpired, kobev1.ReasonInstanceLost, fmt.Sprintf("member %s is gone", ref.Name))
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading member %s: %w", ref.Name, err)
	}
	if binding.Consistent(l, inst) {
		return ctrl.Result{}, nil
	}
	if inst.Spec.LeaseRef != nil {
		// The member went to another lease: this bind lost.
		binding.Unbind(l)
		if err := r.Client.Status().Update(ctx, l); err != nil {
			return ctrl.Result{}, fmt.Errorf("undoing lost bind of %s: %w", l.Name, err)
		}
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	boundAt := l.CreationTimestamp.Time
	if l.Status.BoundAt != nil {
		boundAt = l.Status.BoundAt.Time
	}
	if wait := boundAt.Add(r.RepairGrace).Sub(now); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if binding.Available(inst) {
		binding.SetMemberBinding(inst, l)
		if err := r.Client.Update(ctx, inst); err != nil {
			return ctrl.Result{}, fmt.Errorf("completing interrupted bind of %s to %s: %w", l.Name, inst.Name, err)
		}
		r.Recorder.Eventf(l, inst, "Normal", kobev1.ReasonBound, "Bind", "Completed an interrupted bind to %s", inst.Name)
		return ctrl.Result{}, nil
	}
	binding.Unbind(l)
	if err := r.Client.Status().Update(ctx, l); err != nil {
		return ctrl.Result{}, fmt.Errorf("undoing interrupted bind of %s: %w", l.Name, err)
	}
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// reconcileQueued keeps a queued lease's position current, binds it when its
// turn comes, and ends it after the pool's queue timeout.
func (r *Reconciler) reconcileQueued(ctx context.Context, l *kobev1.ClusterLease, now time.Time) (ctrl.Result, error) {
	pool := &kobev1.ClusterPool{}
	poolErr := r.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}, pool)
	if poolErr != nil && !apierrors.IsNotFound(poolErr) {
		return ctrl.Result{}, fmt.Errorf("reading pool %s: %w", l.Spec.Pool, poolErr)
	}
	if apierrors.IsNotFound(poolErr) {
		pool = nil
	}
	if l.Spec.CleanupMode == kobev1.CleanupVerifiedDestroy {
		// Refused before binding rather than silently downgraded (spec 000).
		return ctrl.Result{}, r.end(ctx, l, kobev1.LeaseReleased, kobev1.ReasonCleanupModeUnsupported,
			"cleanupMode VerifiedDestroy is not supported by any backend wired in this operator; use Standard")
	}
	end := lease.CheckEnd(l, lease.QueueTimeout(pool), now)
	if end.End {
		return ctrl.Result{}, r.end(ctx, l, end.Phase, end.Reason, end.Message)
	}
	if inFlight, wait := lease.InFlight(l, now); inFlight {
		// The HTTP API is binding it on the request path, or will mark it
		// Pending; stepping in now would only make the two collide.
		return ctrl.Result{RequeueAfter: wait}, nil
	}

	var ls kobev1.ClusterLeaseList
	if err := r.Client.List(ctx, &ls, client.InNamespace(l.Namespace), client.MatchingFields{index.LeasePool: l.Spec.Pool}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing queue of pool %s: %w", l.Spec.Pool, err)
	}
	pos := lease.Position(lease.Queue(ls.Items, l.Spec.Pool), l)

	if pool != nil {
		available, err := r.availableMembers(ctx, l)
		if err != nil {
			return ctrl.Result{}, err
		}
		if wait := r.failures.waitLeft(client.ObjectKeyFromObject(l), now); pos <= available && wait > 0 {
			// Its last bind failed: the lease's own writes woke us, not a
			// reason to think the next try goes better.
			if end.RecheckAfter > 0 {
				wait = min(wait, end.RecheckAfter)
			}
			return r.markQueued(ctx, l, pos, false, wait)
		}
		if pos <= available {
			res, err := r.Binder.Bind(ctx, l, lease.TTL(l, pool))
			if err != nil {
				return r.bindFailed(ctx, l, err, now)
			}
			r.failures.forget(client.ObjectKeyFromObject(l))
			metrics.LeaseBound(l.Spec.Pool, "controller", now.Sub(lease.QueuedAt(l)))
			r.Recorder.Eventf(l, res.Instance, "Normal", kobev1.ReasonBound, "Bind", "Bound to %s until %s", res.Instance.Name, l.Status.ExpiresAt.UTC().Format(time.RFC3339))
			return ctrl.Result{RequeueAfter: l.Status.ExpiresAt.Sub(now)}, nil
		}
	}
	return r.markQueued(ctx, l, pos, pool == nil, end.RecheckAfter)
}

// bindFailed logs why a bind failed and backs off (decideBindRetry): never a
// silent retry, never a hot loop.
func (r *Reconciler) bindFailed(ctx context.Context, l *kobev1.ClusterLease, err error, now time.Time) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(l)
	n := r.failures.add(key, now)
	d := decideBindRetry(err, n)
	r.failures.hold(key, now, d.Wait)
	if d.Err != nil {
		// controller-runtime logs it, reason first; the hold paces retries.
		return ctrl.Result{}, d.Err
	}
	level := 1
	if d.Loud {
		level = 0
	}
	ctrl.LoggerFrom(ctx).V(level).Info("Bind failed, retrying", "reason", d.Reason, "failuresInARow", n, "retryAfter", d.Wait, "detail", err.Error())
	return ctrl.Result{RequeueAfter: d.Wait}, nil
}

func (r *Reconciler) availableMembers(ctx context.Context, l *kobev1.ClusterLease) (int32, error) {
	var members kobev1.ClusterInstanceList
	if err := r.Client.List(ctx, &members, client.InNamespace(l.Namespace), client.MatchingLabels{kobev1.LabelPool: l.Spec.Pool}); err != nil {
		return 0, fmt.Errorf("listing members of pool %s: %w", l.Spec.Pool, err)
	}
	var n int32
	for i := range members.Items {
		if binding.Available(&members.Items[i]) {
			n++
		}
	}
	return n, nil
}

func (r *Reconciler) markQueued(ctx context.Context, l *kobev1.ClusterLease, pos int32, poolMissing bool, recheck time.Duration) (ctrl.Result, error) {
	reason, msg := kobev1.ReasonQueued, fmt.Sprintf("waiting for a ready member of pool %s (position %d)", l.Spec.Pool, pos)
	if poolMissing {
		reason, msg = kobev1.ReasonPoolNotFound, fmt.Sprintf("pool %s does not exist", l.Spec.Pool)
	}
	before := l.DeepCopy()
	l.Status.Phase = kobev1.LeasePending
	l.Status.QueuePosition = pos
	l.Status.ObservedGeneration = l.Generation
	meta.SetStatusCondition(&l.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionBound, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: l.Generation,
	})
	if !statusEqual(before, l) {
		if err := r.Client.Status().Patch(ctx, l, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	// Member events wake queued leases; the periodic look is a safety net.
	after := 30 * time.Second
	if recheck > 0 && recheck < after {
		after = recheck
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

func statusEqual(a, b *kobev1.ClusterLease) bool {
	if a.Status.Phase != b.Status.Phase || a.Status.QueuePosition != b.Status.QueuePosition || a.Status.ObservedGeneration != b.Status.ObservedGeneration {
		return false
	}
	ca := meta.FindStatusCondition(a.Status.Conditions, kobev1.ConditionBound)
	cb := meta.FindStatusCondition(b.Status.Conditions, kobev1.ConditionBound)
	if (ca == nil) != (cb == nil) {
		return false
	}
	return ca == nil || (ca.Status == cb.Status && ca.Reason == cb.Reason && ca.Message == cb.Message)
}

// end finishes a lease; the instance controller destroys its member.
func (r *Reconciler) end(ctx context.Context, l *kobev1.ClusterLease, phase kobev1.LeasePhase, reason, msg string) error {
	if err := End(ctx, r.Client, l, phase, reason, msg, r.Clock.Now()); err != nil {
		return err
	}
	metrics.LeaseEnded(l.Spec.Pool, reason)
	r.Recorder.Eventf(l, nil, "Normal", reason, "End", "%s", msg)
	return nil
}

// End writes the end of a lease (lease.End), fenced by its resourceVersion.
//
// Deprecated: the HTTP API's release still calls it; it goes once the API
// calls lease.End and persists the lease itself.
func End(ctx context.Context, c client.Client, l *kobev1.ClusterLease, phase kobev1.LeasePhase, reason, msg string, now time.Time) error {
	lease.End(l, phase, reason, msg, now)
	if err := c.Status().Update(ctx, l); err != nil {
		return fmt.Errorf("ending lease %s: %w", l.Name, err)
	}
	return nil
}
