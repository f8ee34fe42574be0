package clusterlease

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/controller/conditions"
	"github.com/kunobi-ninja/kobe/internal/controller/deps"
	"github.com/kunobi-ninja/kobe/internal/controller/pacing"
	"github.com/kunobi-ninja/kobe/internal/controller/patch"
	"github.com/kunobi-ninja/kobe/internal/controller/seen"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/leadership"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// ControllerName names the controller.
const ControllerName = "clusterlease"

// Reconciler reconciles ClusterLeases. Every field but Retention, AuditRetention and Fence is required; SetupWithManager refuses to start without them.
type Reconciler struct {
	Client client.Client
	// APIReader confirms, around the cache, a binding that looks broken.
	APIReader client.Reader
	Binder    *binding.Binder
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Retention is how long an ended lease is kept (for GET and audit).
	Retention time.Duration
	// AuditRetention is how long the audit record of an ended lease is
	// kept (audit.go); DefaultAuditRetention when zero. AuditJanitor
	// deletes records past it.
	AuditRetention time.Duration
	// Fence stops the API server of the member a lease held as soon as the
	// lease has ended (backend.Registry.Fence). Optional: without it the
	// member's teardown alone cuts its holder's access, a watch hop later.
	Fence func(context.Context, *kobev1.ClusterInstance) error
	// Leadership says whether this replica surely still leads; while it is
	// not sure (a leader resumed after a pause), nothing is bound, ended
	// or recycled. Optional: nil acts always (no leader election).
	Leadership leadership.Checker
	// MaxConcurrentReconciles; 4 when zero. A lease is never reconciled by
	// two workers at once; two leases that race for one member are fenced
	// by the member's resourceVersion.
	MaxConcurrentReconciles int

	// failures paces the retries of binds that keep failing.
	failures bindFailures
	// audited remembers the ended leases whose audit record exists.
	audited seen.Set
	// goneMembers remembers, by the lease they named, the members whose
	// deletion the cache showed (memberEvents): gone for good, they need no
	// live read to be found gone.
	goneMembers seen.Set
	// auditBatches holds the audit records waiting for their batch's write.
	auditBatches auditBatches
	// positionWrites paces the writes of queued leases' positions.
	positionWrites pacing.Writes[types.NamespacedName]
}

// validate names every required dependency that is missing.
func (r *Reconciler) validate() error {
	b := r.Binder
	return deps.Require(ControllerName, map[string]bool{
		"Client": r.Client == nil, "APIReader": r.APIReader == nil, "Recorder": r.Recorder == nil, "Clock": r.Clock == nil,
		"Binder": b == nil, "Binder.Client": b != nil && b.Client == nil, "Binder.Reader": b != nil && b.Reader == nil, "Binder.Clock": b != nil && b.Clock == nil,
	})
}

// SetupWithManager registers the controller. The index.ActiveLeasePool cache
// index must be registered on mgr (index.Setup). It fails when a required
// field is missing, rather than panicking at the first reconcile.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.validate(); err != nil {
		return err
	}
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&kobev1.ClusterLease{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Watches(&kobev1.ClusterLease{}, activeFirst()).
		// A member turning Ready may let queued leases bind; a member
		// disappearing may end the lease bound to it.
		Watches(&kobev1.ClusterInstance{}, r.memberEvents()).
		// A lease joining or leaving the queue moves the ones behind it.
		Watches(&kobev1.ClusterLease{}, r.queueMoved()).
		Complete(r)
}

// activeFirst raises, among the leases the controller finds when it starts
// (a new leader), those not ended above the others: controller-runtime
// queues that initial list at low priority, all alike, and a lease that must
// bind or end now would wait behind the audit check of every ended lease
// kept for retention (make soak: expired leases ended seconds after a
// takeover).
func activeFirst() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			l, ok := e.Object.(*kobev1.ClusterLease)
			if !ok || !e.IsInInitialList || lease.IsEnded(l.Status.Phase) {
				return
			}
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)}
			// The default priority, said outright: handler.Funcs gives an
			// initial list's plain Add the low one.
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(0)}, req)
				return
			}
			q.Add(req)
		},
	}
}

// queueMoved wakes the queued leases behind a lease that joins its pool's
// queue ahead of them (queued-at below one second) or leaves it (bound,
// ended, deleted), so that their positions change at once rather than at
// their next periodic look.
func (r *Reconciler) queueMoved() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if l, ok := e.Object.(*kobev1.ClusterLease); ok && lease.IsQueued(l) {
				r.enqueueBehind(ctx, l, q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			prev, ok := e.ObjectOld.(*kobev1.ClusterLease)
			cur, ok2 := e.ObjectNew.(*kobev1.ClusterLease)
			if ok && ok2 && lease.IsQueued(prev) != lease.IsQueued(cur) {
				r.enqueueBehind(ctx, cur, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if l, ok := e.Object.(*kobev1.ClusterLease); ok {
				r.enqueueBehind(ctx, l, q)
			}
		},
	}
}

// enqueueBehind adds to q the queued leases of moved's pool that come after
// it.
func (r *Reconciler) enqueueBehind(ctx context.Context, moved *kobev1.ClusterLease, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	var ls kobev1.ClusterLeaseList
	if err := r.Client.List(ctx, &ls, client.InNamespace(moved.Namespace), client.MatchingFields{index.ActiveLeasePool: moved.Spec.Pool}); err != nil {
		return // the periodic look of each queued lease catches up
	}
	for _, l := range lease.Queue(ls.Items, moved.Spec.Pool) {
		if l.Name != moved.Name && lease.QueuedBefore(moved, l) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)})
		}
	}
}

// memberEvents enqueues the leases a member event concerns
// (leasesForInstance). A deleted member that named a lease is remembered
// first, before its lease is woken, so that the ended lease's reconcile
// finds it gone without a live read (recycleUnclaimed).
func (r *Reconciler) memberEvents() handler.EventHandler {
	leases := handler.EnqueueRequestsFromMapFunc(r.leasesForInstance)
	return handler.Funcs{
		CreateFunc:  leases.Create,
		UpdateFunc:  leases.Update,
		GenericFunc: leases.Generic,
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if inst, ok := e.Object.(*kobev1.ClusterInstance); ok && inst.Spec.LeaseRef != nil {
				r.goneMembers.Add(types.NamespacedName{Namespace: inst.Namespace, Name: inst.Spec.LeaseRef.Name}, inst.UID)
			}
			leases.Delete(ctx, e, q)
		},
	}
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
	if lease.Bindable(inst) {
		var ls kobev1.ClusterLeaseList
		if err := r.Client.List(ctx, &ls, client.InNamespace(inst.Namespace), client.MatchingFields{index.ActiveLeasePool: inst.Spec.PoolRef.Name}); err == nil {
			for _, l := range lease.Queue(ls.Items, inst.Spec.PoolRef.Name) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(l)})
			}
		}
	}
	return reqs
}

// scope is one reconcile's view of a lease.
type scope struct {
	lease *kobev1.ClusterLease
	// patch writes the status once, fenced, when Reconcile returns; a step
	// that must know its write landed (ending a lease) writes early with it.
	patch *patch.Helper
	cond  conditions.Setter
	now   time.Time
	log   logr.Logger
}

// Reconcile moves one lease along: queued -> bound -> ended -> deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	l := &kobev1.ClusterLease{}
	if err := r.Client.Get(ctx, req.NamespacedName, l); err != nil {
		if apierrors.IsNotFound(err) {
			r.failures.forget(req.NamespacedName)
			r.audited.Forget(req.NamespacedName)
			r.goneMembers.Forget(req.NamespacedName)
			r.auditBatches.forget(req.NamespacedName)
			r.positionWrites.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !lease.IsQueued(l) {
		r.positionWrites.Forget(req.NamespacedName)
	}
	if !lease.IsActive(l) {
		// Only once it ended or is going: a lease that looks Bound may show
		// a binder's claim about to be rolled back, and forgetting its
		// failed binds then would restart their backoff.
		r.failures.forget(req.NamespacedName)
	}
	if l.DeletionTimestamp != nil {
		// The bound member sees its lease go and recycles itself.
		return ctrl.Result{}, nil
	}
	if !leadership.Certain(r.Leadership) {
		// Another replica may lead by now: binding or ending here too
		// could give a lease two members.
		return ctrl.Result{RequeueAfter: leadership.Recheck}, nil
	}
	now := r.Clock.Now()
	if inFlight, wait := lease.InFlight(l, now); inFlight {
		// The HTTP API is binding it on the request path, or will mark it
		// Pending. Any write now, even of observedGeneration, would make
		// the API's fenced claim fail and slow the hand-out down.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	s := &scope{
		lease: l,
		patch: patch.New(r.Client, l),
		cond:  conditions.Setter{Recorder: r.Recorder, Now: now},
		now:   now,
		log:   ctrl.LoggerFrom(ctx),
	}
	defer func() { res, retErr = s.patch.Finish(ctx, res, retErr) }()

	switch {
	case lease.IsEnded(l.Status.Phase):
		return r.reconcileEnded(ctx, s)
	case l.Status.Phase == kobev1.LeaseBound || l.Status.InstanceRef != nil:
		return r.reconcileBound(ctx, s)
	default:
		return r.reconcileQueued(ctx, s)
	}
}
