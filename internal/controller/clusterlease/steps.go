package clusterlease

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/metrics"
)

// queueRecheck is how often a queued lease looks again without an event:
// member events wake queued leases, this is a safety net.
const queueRecheck = 30 * time.Second

// reconcileEnded deletes an ended lease once its retention has passed.
func (r *Reconciler) reconcileEnded(ctx context.Context, s *scope) (ctrl.Result, error) {
	l := s.lease
	ended := l.CreationTimestamp.Time
	if l.Status.EndedAt != nil {
		ended = l.Status.EndedAt.Time
	}
	if left := ended.Add(r.Retention).Sub(s.now); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	if err := r.Client.Delete(ctx, l, client.Preconditions{UID: &l.UID}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("deleting ended lease %s: %w", l.Name, err)
	}
	return ctrl.Result{}, nil
}

// reconcileBound checks the member side of the binding and ends the lease at
// its expiry.
func (r *Reconciler) reconcileBound(ctx context.Context, s *scope) (ctrl.Result, error) {
	if end := lease.CheckEnd(s.lease, 0, s.now); end.End {
		return ctrl.Result{}, r.end(ctx, s, end.Phase, end.Reason, end.Message)
	}
	res, err := r.checkMember(ctx, s)
	if err != nil || s.lease.Status.Phase != kobev1.LeaseBound {
		return res, err
	}
	end := lease.CheckEnd(s.lease, 0, s.now)
	if res.RequeueAfter == 0 || end.RecheckAfter < res.RequeueAfter {
		res.RequeueAfter = end.RecheckAfter
	}
	return res, nil
}

// checkMember verifies that the bound member points back at the lease. A
// bind interrupted between its two writes is completed (member still
// available) or undone, once the binder had RepairGrace to finish it.
func (r *Reconciler) checkMember(ctx context.Context, s *scope) (ctrl.Result, error) {
	l := s.lease
	ref := l.Status.InstanceRef
	if ref == nil {
		return ctrl.Result{}, r.end(ctx, s, kobev1.LeaseExpired, kobev1.ReasonInstanceLost, "lease is bound but names no member")
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
		return ctrl.Result{}, r.end(ctx, s, kobev1.LeaseExpired, kobev1.ReasonInstanceLost, fmt.Sprintf("member %s is gone", ref.Name))
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading member %s: %w", ref.Name, err)
	}
	if binding.Consistent(l, inst) {
		return ctrl.Result{}, nil
	}
	if inst.Spec.LeaseRef != nil {
		// The member went to another lease: this bind lost. Queue again;
		// the deferred status write is fenced like every other.
		s.log.Info("Member went to another lease; queuing again", "member", klog.KObj(inst))
		binding.Unbind(l, s.now)
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	boundAt := l.CreationTimestamp.Time
	if l.Status.BoundAt != nil {
		boundAt = l.Status.BoundAt.Time
	}
	if wait := boundAt.Add(r.RepairGrace).Sub(s.now); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if binding.Available(inst) {
		binding.SetMemberBinding(inst, l)
		if err := r.Client.Update(ctx, inst); err != nil {
			return ctrl.Result{}, fmt.Errorf("completing interrupted bind of %s to %s: %w", l.Name, inst.Name, err)
		}
		s.log.Info("Completed an interrupted bind", "member", klog.KObj(inst))
		r.Recorder.Eventf(l, inst, corev1.EventTypeNormal, kobev1.ReasonBound, "Bind", "Completed an interrupted bind to %s", inst.Name)
		return ctrl.Result{}, nil
	}
	s.log.Info("Undoing an interrupted bind: the member is no longer available", "member", klog.KObj(inst))
	binding.Unbind(l, s.now)
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// reconcileQueued keeps a queued lease's position current, binds it when its
// turn comes, and ends it after the pool's queue timeout.
func (r *Reconciler) reconcileQueued(ctx context.Context, s *scope) (ctrl.Result, error) {
	l := s.lease
	pool := &kobev1.ClusterPool{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading pool %s: %w", l.Spec.Pool, err)
		}
		pool = nil
	}
	if l.Spec.CleanupMode == kobev1.CleanupVerifiedDestroy {
		// Refused before binding rather than silently downgraded (spec 000).
		return ctrl.Result{}, r.end(ctx, s, kobev1.LeaseReleased, kobev1.ReasonCleanupModeUnsupported,
			"cleanupMode VerifiedDestroy is not supported by any backend wired in this operator; use Standard")
	}
	end := lease.CheckEnd(l, lease.QueueTimeout(pool), s.now)
	if end.End {
		return ctrl.Result{}, r.end(ctx, s, end.Phase, end.Reason, end.Message)
	}
	var ls kobev1.ClusterLeaseList
	if err := r.Client.List(ctx, &ls, client.InNamespace(l.Namespace), client.MatchingFields{index.LeasePool: l.Spec.Pool}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing queue of pool %s: %w", l.Spec.Pool, err)
	}
	pos := lease.Position(lease.Queue(ls.Items, l.Spec.Pool), l)
	if pool == nil {
		return r.markQueued(s, pos, true, end.RecheckAfter), nil
	}
	available, err := r.availableMembers(ctx, l)
	if err != nil {
		return ctrl.Result{}, err
	}
	if pos > available {
		return r.markQueued(s, pos, false, end.RecheckAfter), nil
	}
	if wait := r.failures.waitLeft(client.ObjectKeyFromObject(l), s.now); wait > 0 {
		// Its last bind failed and its wait is not over: the lease's own
		// writes woke it, which is no reason to think the next try goes better.
		if end.RecheckAfter > 0 {
			wait = min(wait, end.RecheckAfter)
		}
		return r.markQueued(s, pos, false, wait), nil
	}
	return r.bind(ctx, s, pool)
}

// bind binds the lease at the head of the queue to a Ready member.
func (r *Reconciler) bind(ctx context.Context, s *scope, pool *kobev1.ClusterPool) (ctrl.Result, error) {
	l := s.lease
	res, err := r.Binder.Bind(ctx, l, lease.TTL(l, pool))
	// The binder wrote the lease itself (its claim, or claim and roll-back)
	// and l is the server's answer: that is the base of any further write.
	s.patch.Snapshot()
	if err != nil {
		return r.bindFailed(s, err)
	}
	r.failures.forget(client.ObjectKeyFromObject(l))
	metrics.LeaseBound(l.Spec.Pool, "controller", s.now.Sub(lease.QueuedAt(l)))
	expires := l.Status.ExpiresAt.UTC().Format(time.RFC3339)
	s.log.Info("Lease bound", "member", klog.KObj(res.Instance), "expiresAt", expires)
	r.Recorder.Eventf(l, res.Instance, corev1.EventTypeNormal, kobev1.ReasonBound, "Bind", "Bound to %s until %s", res.Instance.Name, expires)
	return ctrl.Result{RequeueAfter: l.Status.ExpiresAt.Sub(s.now)}, nil
}

// bindFailed logs why a bind failed and holds the lease back before it tries
// again (decideBindRetry): never a silent retry, never a hot loop.
func (r *Reconciler) bindFailed(s *scope, err error) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(s.lease)
	// The wait counts from the failure, not from the start of the
	// reconcile: the bind's own API calls must not eat into it.
	failedAt := r.Clock.Now()
	n := r.failures.add(key, failedAt)
	d := decideBindRetry(err, n)
	r.failures.hold(key, failedAt, d.Wait)
	if d.Err != nil {
		// controller-runtime logs it, reason first; the hold paces retries.
		return ctrl.Result{}, d.Err
	}
	level := 1
	if d.Loud {
		level = 0
	}
	s.log.V(level).Info("Bind failed, retrying", "reason", d.Reason, "failuresInARow", n, "retryAfter", d.Wait, "detail", err.Error())
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

// markQueued records the lease's place in the queue, or that its pool is
// missing; the deferred status write persists it when anything changed.
func (r *Reconciler) markQueued(s *scope, pos int32, poolMissing bool, recheck time.Duration) ctrl.Result {
	l := s.lease
	reason, eventType := kobev1.ReasonQueued, corev1.EventTypeNormal
	msg := fmt.Sprintf("waiting for a ready member of pool %s (position %d)", l.Spec.Pool, pos)
	if poolMissing {
		reason, eventType = kobev1.ReasonPoolNotFound, corev1.EventTypeWarning
		msg = fmt.Sprintf("pool %s does not exist", l.Spec.Pool)
	}
	l.Status.Phase = kobev1.LeasePending
	l.Status.QueuePosition = pos
	s.cond.Mark(l, eventType, metav1.Condition{Type: kobev1.ConditionBound, Status: metav1.ConditionFalse, Reason: reason, Message: msg})
	after := queueRecheck
	if recheck > 0 && recheck < after {
		after = recheck
	}
	return ctrl.Result{RequeueAfter: after}
}

// end ends the lease (lease.End) and writes it at once, fenced, so that the
// event and metric tell only of ends that landed. When the lease changed
// meanwhile nothing is written and the reconcile decides again.
func (r *Reconciler) end(ctx context.Context, s *scope, phase kobev1.LeasePhase, reason, msg string) error {
	lease.End(s.lease, phase, reason, msg, s.now)
	if err := s.patch.Status(ctx); err != nil {
		return fmt.Errorf("ending lease %s: %w", s.lease.Name, err)
	}
	if s.patch.Done() {
		return nil
	}
	metrics.LeaseEnded(s.lease.Spec.Pool, reason)
	eventType := corev1.EventTypeNormal
	if reason == kobev1.ReasonInstanceLost || reason == kobev1.ReasonCleanupModeUnsupported {
		eventType = corev1.EventTypeWarning
	}
	s.log.Info("Lease ended", "phase", phase, "reason", reason)
	s.cond.Event(s.lease, eventType, reason, "End", msg)
	return nil
}
