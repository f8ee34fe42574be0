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
	"github.com/kunobi-ninja/kobe/internal/leadership"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/metrics"
)

// queueRecheck is how often a queued lease looks again without an event:
// member events wake queued leases, this is a safety net.
const queueRecheck = 30 * time.Second

// reconcileEnded deletes an ended lease once its retention has passed. A
// member its status names without naming it back is recycled first.
func (r *Reconciler) reconcileEnded(ctx context.Context, s *scope) (ctrl.Result, error) {
	l := s.lease
	if err := r.recycleUnclaimed(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	// Before the lease may go: the record outlives it.
	wait, err := r.audit(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
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

// recycleUnclaimed recycles the member an ended lease's status names when
// that member names no lease (a forged status, or one the lease ended with
// before it was dropped). The cache answers the common cases (the member
// names a lease; the cache showed its deletion); an unclaimed one, or one
// the cache lacks without having seen it go, is read live.
func (r *Reconciler) recycleUnclaimed(ctx context.Context, s *scope) error {
	ref := s.lease.Status.InstanceRef
	if ref == nil {
		return nil
	}
	cached := &kobev1.ClusterInstance{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.lease.Namespace, Name: ref.Name}, cached)
	switch {
	case apierrors.IsNotFound(err):
		if r.goneMembers.Has(client.ObjectKeyFromObject(s.lease), ref.UID) {
			return nil
		}
	case err != nil:
		return fmt.Errorf("reading member %s: %w", ref.Name, err)
	case cached.UID != ref.UID || cached.Spec.LeaseRef != nil:
		return nil
	}
	inst, err := r.liveMember(ctx, s.lease.Namespace, ref)
	if err != nil || inst == nil || inst.Spec.LeaseRef != nil {
		return err
	}
	return r.recycleMember(ctx, s, inst)
}

// reconcileBound checks a lease whose status names a member and ends it at
// its expiry.
func (r *Reconciler) reconcileBound(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.lease.Status.Phase == kobev1.LeaseBound {
		if end := lease.CheckEnd(s.lease, 0, s.now); end.End {
			return ctrl.Result{}, r.end(ctx, s, end.Phase, end.Reason, end.Message)
		}
	}
	res, err := r.checkMember(ctx, s)
	if err != nil || s.lease.Status.Phase != kobev1.LeaseBound {
		return res, err
	}
	// checkMember may have capped a forged expiry that has passed.
	end := lease.CheckEnd(s.lease, 0, s.now)
	if end.End {
		return ctrl.Result{}, r.end(ctx, s, end.Phase, end.Reason, end.Message)
	}
	if res.RequeueAfter == 0 || end.RecheckAfter < res.RequeueAfter {
		res.RequeueAfter = end.RecheckAfter
	}
	return res, nil
}

// checkMember verifies that the member the lease's status names names the
// lease back (its leaseRef, the record of the bind). A status that names a
// member that does not (forged by a status write, or stale) is dropped and
// the lease queued again; that member, if no lease holds it, is recycled,
// never handed out. A lease whose member is gone ends (InstanceLost).
func (r *Reconciler) checkMember(ctx context.Context, s *scope) (ctrl.Result, error) {
	l := s.lease
	ref := l.Status.InstanceRef
	if ref == nil {
		return r.recordOrQueue(ctx, s, "lease is Bound but names no member")
	}
	// The cache answers the common case (both sides agree); anything else
	// is confirmed against the API server before acting on it.
	cached := &kobev1.ClusterInstance{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: ref.Name}, cached); err == nil && binding.Consistent(l, cached) {
		return r.recordFrom(ctx, s, cached)
	}
	inst, err := r.liveMember(ctx, l.Namespace, ref)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case inst == nil && l.Status.Phase == kobev1.LeaseBound:
		return ctrl.Result{}, r.end(ctx, s, kobev1.LeaseExpired, kobev1.ReasonInstanceLost, fmt.Sprintf("member %s is gone", ref.Name))
	case inst == nil:
		return r.recordOrQueue(ctx, s, fmt.Sprintf("member %s is gone", ref.Name))
	case binding.Consistent(l, inst):
		return r.recordFrom(ctx, s, inst)
	case inst.Spec.LeaseRef == nil:
		// Named by this lease's status, claimed by no lease: never a bind
		// of this protocol, which writes the status from a member that
		// already names the lease. It must not be handed to anyone.
		if err := r.recycleMember(ctx, s, inst); err != nil {
			return ctrl.Result{}, err
		}
	}
	return r.recordOrQueue(ctx, s, fmt.Sprintf("member %s does not name lease %s", ref.Name, l.Name))
}

// recordOrQueue handles a lease whose status does not name its bind: the
// member that names the lease, read live, is recorded, else the lease is
// queued again.
func (r *Reconciler) recordOrQueue(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	inst, err := r.namingMember(ctx, s.lease, true)
	if err != nil {
		return ctrl.Result{}, err
	}
	if inst != nil {
		return r.recordFrom(ctx, s, inst)
	}
	s.log.Info("Lease status names no member that holds it; queuing again", "why", why)
	binding.Unbind(s.lease, s.now)
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// recordFrom writes the lease's copy of the bind inst confirms (for a
// lease already Bound to inst, only an expiry capped at what the bind
// allows) with the deferred status write.
func (r *Reconciler) recordFrom(ctx context.Context, s *scope, inst *kobev1.ClusterInstance) (ctrl.Result, error) {
	l := s.lease
	if lost, why := memberLost(inst); lost {
		return ctrl.Result{}, r.endLost(ctx, s, inst, why)
	}
	if l.Status.Phase == kobev1.LeaseBound && binding.Consistent(l, inst) {
		// The status is a copy anyone with clusterleases/status may write:
		// an expiry later than the bind allows is brought back.
		if lease.CapExpiry(l, r.poolOrNil(ctx, l), binding.BoundAt(inst, l)) {
			s.log.Info("Lease expiry was later than its bind allows; capped", "expiresAt", l.Status.ExpiresAt.UTC().Format(time.RFC3339))
		}
		return ctrl.Result{}, nil
	}
	binding.RecordBound(l, inst, lease.TTL(l, r.poolOrNil(ctx, l)))
	s.log.Info("Recorded a bind from its member", "member", klog.KObj(inst), "expiresAt", l.Status.ExpiresAt.UTC().Format(time.RFC3339))
	return ctrl.Result{RequeueAfter: max(l.Status.ExpiresAt.Sub(s.now), time.Millisecond)}, nil
}

// liveMember reads the member ref names from the API server; nil when it is
// gone (or re-created under the same name).
func (r *Reconciler) liveMember(ctx context.Context, ns string, ref *kobev1.ObjectRef) (*kobev1.ClusterInstance, error) {
	inst := &kobev1.ClusterInstance{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, inst)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading member %s: %w", ref.Name, err)
	case ref.UID != "" && inst.UID != ref.UID:
		return nil, nil
	}
	return inst, nil
}

// namingMember finds the member whose leaseRef names l, from the cache
// (index.InstanceLeaseUID) or, live, from the API server (lease label); when
// several do, the earliest bind (binding.Elect), the others being recycled
// by the instance controller once the lease's status names the one.
func (r *Reconciler) namingMember(ctx context.Context, l *kobev1.ClusterLease, live bool) (*kobev1.ClusterInstance, error) {
	var ms kobev1.ClusterInstanceList
	var err error
	if live {
		err = r.APIReader.List(ctx, &ms, client.InNamespace(l.Namespace), client.MatchingLabels{kobev1.LabelLease: l.Name})
	} else {
		err = r.Client.List(ctx, &ms, client.InNamespace(l.Namespace), client.MatchingFields{index.InstanceLeaseUID: string(l.UID)})
	}
	if err != nil {
		return nil, fmt.Errorf("listing members naming lease %s: %w", l.Name, err)
	}
	return binding.Elect(ms.Items, l), nil
}

// recycleMember deletes a member that a lease's status names but no lease
// holds, fenced by what was read: one claimed meanwhile is left alone. The
// instance controller's finalizer then destroys it.
func (r *Reconciler) recycleMember(ctx context.Context, s *scope, inst *kobev1.ClusterInstance) error {
	if inst.DeletionTimestamp != nil {
		return nil
	}
	uid, rv := inst.UID, inst.ResourceVersion
	if err := r.Client.Delete(ctx, inst, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recycling member %s named by lease %s: %w", inst.Name, s.lease.Name, err)
	}
	s.log.Info("Recycled a member the lease's status names but which does not name the lease", "member", klog.KObj(inst))
	r.Recorder.Eventf(s.lease, inst, corev1.EventTypeWarning, kobev1.ReasonInstanceLost, "Recycle",
		"Member %s is named by this lease's status but was never bound to it; it is recycled, not handed out", inst.Name)
	return nil
}

func (r *Reconciler) poolOrNil(ctx context.Context, l *kobev1.ClusterLease) *kobev1.ClusterPool {
	pool := &kobev1.ClusterPool{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}, pool); err != nil {
		return nil
	}
	return pool
}

// reconcileQueued records a bind its member already made, keeps a queued
// lease's position current, binds it when its turn comes, and ends it after
// the pool's queue timeout.
func (r *Reconciler) reconcileQueued(ctx context.Context, s *scope) (ctrl.Result, error) {
	l := s.lease
	// A member may name the lease already: a fast-path bind whose status
	// copy was not written, or this controller's own whose write failed.
	if inst, err := r.namingMember(ctx, l, false); err != nil || inst != nil {
		if err != nil {
			return ctrl.Result{}, err
		}
		return r.recordFrom(ctx, s, inst)
	}
	pool := &kobev1.ClusterPool{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading pool %s: %w", l.Spec.Pool, err)
		}
		pool = nil
	}
	if err := r.Binder.CheckCleanupMode(l.Spec.CleanupMode, pool); err != nil {
		// Refused before binding rather than silently downgraded (spec 000).
		return ctrl.Result{}, r.end(ctx, s, kobev1.LeaseReleased, kobev1.ReasonCleanupModeUnsupported, err.Error())
	}
	end := lease.CheckEnd(l, lease.QueueTimeout(pool), s.now)
	if end.End {
		return ctrl.Result{}, r.end(ctx, s, end.Phase, end.Reason, end.Message)
	}
	var ls kobev1.ClusterLeaseList
	if err := r.Client.List(ctx, &ls, client.InNamespace(l.Namespace), client.MatchingFields{index.ActiveLeasePool: l.Spec.Pool}); err != nil {
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
	// Never a second member: look, live, for one that names the lease
	// (the cache may not show a claim made a moment ago) before claiming.
	if inst, err := r.namingMember(ctx, l, true); err != nil || inst != nil {
		if err != nil {
			return ctrl.Result{}, err
		}
		return r.recordFrom(ctx, s, inst)
	}
	return r.bind(ctx, s, pool)
}

// bind claims a Ready member for the lease at the head of the queue and
// records the bind on the lease. If that write fails, the member names the
// lease all the same and the next reconcile records it (reconcileQueued).
func (r *Reconciler) bind(ctx context.Context, s *scope, pool *kobev1.ClusterPool) (ctrl.Result, error) {
	l := s.lease
	if !leadership.Certain(r.Leadership) {
		// Checked again just before the claim: the reconcile may have
		// been paused since it began.
		return ctrl.Result{RequeueAfter: leadership.Recheck}, nil
	}
	res, err := r.Binder.Bind(ctx, l)
	if err != nil {
		return r.bindFailed(s, err)
	}
	r.failures.forget(client.ObjectKeyFromObject(l))
	binding.RecordBound(l, res.Instance, lease.TTL(l, pool))
	if err := s.patch.Status(ctx); err != nil || s.patch.Done() {
		return ctrl.Result{}, err
	}
	metrics.LeaseBound(l.Spec.Pool, "controller", s.now.Sub(lease.QueuedAt(l)))
	expires := l.Status.ExpiresAt.UTC().Format(time.RFC3339)
	s.log.Info("Lease bound", "member", klog.KObj(res.Instance), "expiresAt", expires)
	return ctrl.Result{RequeueAfter: max(l.Status.ExpiresAt.Sub(s.now), time.Millisecond)}, nil
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
	if err := r.Client.List(ctx, &members, client.InNamespace(l.Namespace), client.MatchingFields{index.InstancePool: l.Spec.Pool}); err != nil {
		return 0, fmt.Errorf("listing members of pool %s: %w", l.Spec.Pool, err)
	}
	var n int32
	for i := range members.Items {
		if lease.Bindable(&members.Items[i]) {
			n++
		}
	}
	return n, nil
}

// markQueued records the lease's place in the queue, or that its pool is
// missing; the deferred status write persists it when anything changed. A
// move of the position alone waits until lease.PositionEvery has passed
// since its last write (lease.HoldPosition): the HTTP API tells callers
// their position afresh, and every hand-out ahead of the lease moves it.
func (r *Reconciler) markQueued(s *scope, pos int32, poolMissing bool, recheck time.Duration) ctrl.Result {
	l := s.lease
	after := queueRecheck
	if recheck > 0 && recheck < after {
		after = recheck
	}
	if poolMissing {
		// A person acts on it: an Event. Waiting in the queue is routine.
		l.Status.Phase = kobev1.LeasePending
		l.Status.QueuePosition = pos
		s.cond.Mark(l, corev1.EventTypeWarning, metav1.Condition{Type: kobev1.ConditionBound, Status: metav1.ConditionFalse,
			Reason: kobev1.ReasonPoolNotFound, Message: fmt.Sprintf("pool %s does not exist", l.Spec.Pool)})
		return ctrl.Result{RequeueAfter: after}
	}
	if hold := lease.HoldPosition(l, pos, r.positionWrites.At(client.ObjectKeyFromObject(l)), s.now); hold > 0 {
		return ctrl.Result{RequeueAfter: min(after, hold)}
	}
	before := l.Status.QueuePosition
	c := lease.QueuedCondition(l, pos)
	l.Status.Phase = kobev1.LeasePending
	l.Status.QueuePosition = pos
	if s.cond.Set(l, c) || before != pos {
		r.positionWrites.Wrote(client.ObjectKeyFromObject(l), s.now)
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
	r.fenceMember(ctx, s)
	s.log.Info("Lease ended", "phase", phase, "reason", reason)
	// An Event only for an end a person acts on; released and expired
	// leases are routine (their status says so). A missed heartbeat is a
	// holder that died (a killed runner) without releasing; an idle one a
	// cluster nobody used.
	if reason == kobev1.ReasonInstanceLost || reason == kobev1.ReasonCleanupModeUnsupported || reason == kobev1.ReasonHeartbeatMissed || reason == kobev1.ReasonIdle {
		s.cond.Event(s.lease, corev1.EventTypeWarning, reason, "End", msg)
	}
	return nil
}
