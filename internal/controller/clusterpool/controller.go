package clusterpool

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/bootstrap"
	"github.com/kunobi-ninja/kobe/internal/controller/conditions"
	"github.com/kunobi-ninja/kobe/internal/controller/deps"
	"github.com/kunobi-ninja/kobe/internal/controller/pacing"
	"github.com/kunobi-ninja/kobe/internal/controller/patch"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/leadership"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/netpolprobe"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// ControllerName names the controller and its events' reporter.
const ControllerName = "kobe-clusterpool"

// Reconciler keeps each ClusterPool's members at what internal/pool decides.
type Reconciler struct {
	// Client is the manager's client; the pool's members and leases are
	// read from its cache through the index.InstancePool and
	// index.ActiveLeasePool and index.LeasePool indexes
	// (index.Setup). Required.
	Client client.Client
	// APIReader lists members live before the pool creates or deletes any
	// while a create or delete of its own is not in the cache yet: acting on
	// a lagging cache could overshoot the target. Otherwise the cache is
	// enough (see expectations).
	// Default: mgr.GetAPIReader().
	APIReader client.Reader
	// Recorder is from mgr.GetEventRecorder(ControllerName). Required.
	Recorder events.EventRecorder
	// Backends are the wired backends; their capabilities decide which pool
	// fields are acted on. Required (it may be empty).
	Backends backend.Registry
	// BootstrapJobs: the host cluster has nodes, so BootstrapConfigs that
	// run a Job are run for kubernetes backend members; otherwise a pool
	// naming one builds no member and says why.
	BootstrapJobs bool
	// Clock is the time every decision is made at. Required.
	Clock clock.PassiveClock

	// SignalGrace is how long a member may be Provisioned without passing a
	// readiness gate before the pool reports ReadinessSignalAbsent;
	// pool.DefaultSignalGrace when zero.
	SignalGrace time.Duration
	// FreezeSettle is how long a warm member runs before it may be frozen;
	// pool.DefaultFreezeSettle when zero.
	FreezeSettle time.Duration
	// MaxConcurrentReconciles; 4 when zero. Pools are independent, and a
	// pool that fills waits on the API server for each member it creates:
	// one worker would make a thousand pools fill one after another.
	MaxConcurrentReconciles int
	// HostCaps caps, per backend type, the members this host holds across
	// every pool and namespace the operator sees (the local backend's:
	// --local-max-members). A pool that wants more creates nothing beyond
	// the cap and reports Capacity False, HostCapacityReached. Types not
	// listed, or with Max 0, have no cap.
	HostCaps map[kobev1.BackendType]HostCap
	// Limits are the operator's defaults and ceilings of member limits
	// (--member-* flags); the zero value gives members no limits.
	Limits pool.LimitPolicy
	// NetworkPolicy says whether the host cluster enforces the
	// NetworkPolicy that isolates each kubernetes backend member (the
	// netpolprobe.Prober); nil: nobody judges it and no pool reports it.
	NetworkPolicy NetworkPolicyProber
	// RequireNetworkPolicy: a kubernetes backend pool whose verdict is not
	// Enforced (Unknown included) builds and hands out nothing.
	RequireNetworkPolicy bool
	// Leadership says whether this replica surely still leads; while it is
	// not sure (a leader resumed after a pause), pools are left as they
	// are. Optional: nil acts always (no leader election).
	Leadership leadership.Checker

	// expected holds this process's creates and deletes of members until
	// the cache shows them.
	expected expectations
	// statusWrites paces status writes under churn (coalesce.go).
	statusWrites pacing.Writes[types.UID]
	// ordinals remembers what this replica used of each pool's block.
	ordinals ordinalsUsed
	// host serialises the count-and-create of members of capped types.
	host hostLedger
	// creates bounds the member creates in flight across pools.
	creates createSlots
}

// scope is one reconcile's view of a pool.
type scope struct {
	pool *kobev1.ClusterPool
	// patch holds the snapshot of pool and writes its status, fenced; once
	// it is Done (gone or stale) nothing more is written.
	patch *patch.Helper
	// conds sets conditions at the reconcile's time and tells reason
	// changes as events.
	conds conditions.Setter
	// plan and queue are what internal/pool decided from the live members.
	plan  pool.Plan
	queue int32
	// members are the members the plan was made from.
	members []kobev1.ClusterInstance
	// demandRequeue is when status.demand must be measured again (a lease
	// still inside the cache lag, or a bucket leaving the window); 0: none.
	demandRequeue time.Duration
	// cacheWait is when to decide again because the cache did not yet
	// show this pool's own last creates and deletes (expectations).
	cacheWait time.Duration
	// host is the per-host budget of the pool's backend type.
	host pool.HostBudget
	// bundles are the content digests of the pool's BootstrapConfigs.
	bundles map[string]string
	// jobBundles names the bundles of the pool that run a Job (refused).
	jobBundles []string
	// netpol is the NetworkPolicy verdict for the pool; nil: not judged.
	netpol *pool.NetworkPolicyCheck
}

// NetworkPolicyProber is what the pool controller needs of the
// netpolprobe.Prober.
type NetworkPolicyProber interface {
	// Verdict is the latest verdict for an etcd image ("" the default).
	Verdict(image string) netpolprobe.Verdict
	// Request asks for a probe of the image soon.
	Request(image string, pull corev1.PullPolicy)
	// Changes tells that some verdict changed.
	Changes() <-chan event.GenericEvent
}

// Reconcile converges one pool: get, scope, one deferred fenced status
// patch, the finalizer, then plan, status, reserve ordinals, create, delete.
// The status comes before the reservation so that a reservation, a status
// write of its own, carries the new counts and conditions too: a pool that
// fills writes its status once for both.
// It runs again at the plan's time or when the demand must be measured
// again, whichever is sooner.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	p := &kobev1.ClusterPool{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !leadership.Certain(r.Leadership) {
		// Another replica may lead by now and create or delete members too.
		return ctrl.Result{RequeueAfter: leadership.Recheck}, nil
	}
	s := &scope{pool: p, patch: patch.New(r.Client, p), conds: conditions.Setter{Recorder: r.Recorder, Now: r.Clock.Now()}}
	defer func() {
		if retErr == nil && !s.patch.Done() {
			res = r.coalesceStatus(s, res)
		}
		res, retErr = s.patch.Finish(ctx, res, retErr)
		if s.patch.Gone() {
			r.statusWrites.Forget(p.UID)
			r.ordinals.forget(p.UID)
		} else {
			publishMetrics(p)
		}
	}()

	if !p.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if err := s.patch.AddFinalizer(ctx, kobev1.FinalizerPool); err != nil || s.patch.Done() {
		return ctrl.Result{}, err
	}
	defer r.lockHost(p)()
	for _, step := range []func(context.Context, *scope) error{r.decide, r.setStatus, r.reserveOrdinals, r.createMembers} {
		if err := step(ctx, s); err != nil || s.patch.Done() {
			return ctrl.Result{}, err
		}
	}
	if res, retErr = r.scaleDown(ctx, s); retErr != nil || s.patch.Done() {
		return res, retErr
	}
	freezeAgain, err := r.freezeWarm(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, again := range []time.Duration{s.demandRequeue, freezeAgain, s.cacheWait} {
		if again > 0 && (res.RequeueAfter <= 0 || again < res.RequeueAfter) {
			res.RequeueAfter = again
		}
	}
	return res, nil
}

// decide gathers the pool's members, leases and queue, measures its demand
// and asks internal/pool. It
// decides from the cache; only a plan that creates or deletes members is
// made again from a live list, so that a pool at rest costs the API server
// nothing and one that acts never acts on a lagging cache. Reserving
// ordinals needs no live list: a member is created only after its ordinal
// was reserved, so one missing from the cache is already below
// status.nextOrdinal, which never goes down.
func (r *Reconciler) decide(ctx context.Context, s *scope) error {
	active, err := r.leases(ctx, s.pool, index.ActiveLeasePool)
	if err != nil {
		return err
	}
	members, err := r.members(ctx, s.pool, r.Client)
	if err != nil {
		return err
	}
	if s.host, err = r.hostBudget(ctx, s.pool, s.conds.Now); err != nil {
		return err
	}
	if s.bundles, s.jobBundles, err = r.bundles(ctx, s.pool); err != nil {
		return err
	}
	s.queue = int32(len(lease.Queue(active, s.pool.Name)))
	s.netpol = r.networkPolicy(s.pool)
	// Before the plan, which reads it: Predictive aims for its warm target
	// and DemandCovered compares with it. The history is kept in the status
	// (the deferred patch writes it), so a restart or failover keeps it.
	// Demand counts arrivals, ended leases included: only a pool that
	// scales on it reads the pool's history.
	history := active
	if s.pool.Spec.Scaling != nil {
		if history, err = r.leases(ctx, s.pool, index.LeasePool); err != nil {
			return err
		}
	}
	s.pool.Status.Demand, s.demandRequeue = pool.MeasureDemand(s.pool, history, members, s.conds.Now)
	// Before the plan too: the create backoff reads the failure streak.
	if err := r.countFailures(ctx, s, members); err != nil || s.patch.Done() {
		return err
	}
	s.plan = r.plan(s, members)
	if !acts(s.plan) {
		s.members = members
		return nil
	}
	seen, wait := r.expected.seen(s.pool.UID, members, s.conds.Now)
	if seen {
		s.members = members
		return nil
	}
	if wait > 0 {
		// The cache does not show all of this pool's own last creates and
		// deletes yet; their events wake the pool in a moment, and it acts
		// then. Listing live instead cost a full read of the pool's members
		// on nearly every refill under churn.
		s.members = members
		s.plan.NextOrdinal -= int32(len(s.plan.Create))
		s.plan.Create, s.plan.Delete = nil, nil
		s.cacheWait = wait
		return nil
	}
	cached := members
	if members, err = r.members(ctx, s.pool, r.APIReader); err != nil {
		return err
	}
	r.expected.lagging(s.pool.UID, cached, members, s.conds.Now)
	if err := r.countFailures(ctx, s, members); err != nil || s.patch.Done() {
		return err
	}
	s.plan = r.plan(s, members)
	s.members = members
	return nil
}

// countFailures counts members that failed to become Ready into the pool's
// failure streak (pool.CountFailures) and, when it counted any, writes the
// status at once: the failed members wait for it before they go, and the
// metric counts a failure once its count has landed.
func (r *Reconciler) countFailures(ctx context.Context, s *scope, members []kobev1.ClusterInstance) error {
	counted := pool.CountFailures(&s.pool.Status, members)
	if len(counted) == 0 {
		return nil
	}
	if err := s.patch.Status(ctx); err != nil || s.patch.Done() {
		return err
	}
	for _, f := range counted {
		metrics.MemberFailure(s.pool.Namespace, s.pool.Name, f.Reason)
	}
	return nil
}

// acts reports whether plan creates or deletes members.
func acts(plan pool.Plan) bool {
	return len(plan.Create) > 0 || len(plan.Delete) > 0
}

// plan asks internal/pool.
func (r *Reconciler) plan(s *scope, members []kobev1.ClusterInstance) pool.Plan {
	p := s.pool
	wired := make([]kobev1.BackendType, 0, len(r.Backends))
	for t := range r.Backends {
		wired = append(wired, t)
	}
	slices.Sort(wired)
	return pool.Decide(pool.Input{
		Pool: p, Members: members, FirstFree: r.ordinals.firstFree(p.UID), QueueDepth: s.queue, Wired: wired,
		Backend: r.capabilities(p.Spec.Backend.Type), Now: s.conds.Now, SignalGrace: r.SignalGrace, Host: s.host,
		Bundles: s.bundles, JobBundles: s.jobBundles, JobsRefusal: r.jobsRefusal(p), NetworkPolicy: s.netpol,
		DefaultNodes: r.defaultNodes(p), Limits: r.Limits, LimitsRefusal: r.limitsRefusal(p),
	})
}

// defaultNodes asks the wired backend of p's type how many nodes a member
// gets when p leaves nodes unset; none when the backend has no nodes or is
// not wired.
func (r *Reconciler) defaultNodes(p *kobev1.ClusterPool) pool.NodeDefault {
	b, ok := r.Backends.For(p.Spec.Backend.Type)
	if !ok {
		return pool.NodeDefault{Why: "the " + string(p.Spec.Backend.Type) + " backend is not wired"}
	}
	d, ok := b.(backend.NodeDefaulter)
	if !ok {
		return pool.NodeDefault{Why: "the " + string(p.Spec.Backend.Type) + " backend runs no nodes"}
	}
	n, why := d.DefaultNodes(&p.Spec)
	return pool.NodeDefault{Count: n, Why: why}
}

// limitsRefusal is why the wired backend of p's type cannot enforce member
// limits; empty when it can, or when it is not wired (nothing is built).
func (r *Reconciler) limitsRefusal(p *kobev1.ClusterPool) string {
	b, ok := r.Backends.For(p.Spec.Backend.Type)
	if !ok {
		return ""
	}
	e, ok := b.(backend.LimitEnforcer)
	if !ok {
		return "the " + string(p.Spec.Backend.Type) + " backend does not enforce cluster.limits yet"
	}
	if ok, why := e.EnforcesLimits(); !ok {
		return why
	}
	return ""
}

// networkPolicy is the prober's verdict for a kubernetes backend pool's
// etcd image (the probe pods run it), nil for other pools. A probe is
// asked for when none finished yet (start-up) and when the pool changed
// since its condition was written.
func (r *Reconciler) networkPolicy(p *kobev1.ClusterPool) *pool.NetworkPolicyCheck {
	if r.NetworkPolicy == nil || p.Spec.Backend.Type != kobev1.BackendKubernetes {
		return nil
	}
	var img string
	var pull corev1.PullPolicy
	if k := p.Spec.Backend.Kubernetes; k != nil && k.Images != nil {
		img, pull = k.Images.Etcd, k.Images.PullPolicy
	}
	v := r.NetworkPolicy.Verdict(img)
	if old := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionNetworkPolicyEnforced); v.Pending || old == nil || old.ObservedGeneration < p.Generation {
		r.NetworkPolicy.Request(img, pull)
	}
	return &pool.NetworkPolicyCheck{Condition: v.Condition(), Required: r.RequireNetworkPolicy}
}

// kubernetesPools wakes every kubernetes backend pool: a NetworkPolicy
// verdict changed.
func (r *Reconciler) kubernetesPools(ctx context.Context, _ client.Object) []reconcile.Request {
	var pools kobev1.ClusterPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing pools after a NetworkPolicy verdict")
		return nil
	}
	var out []reconcile.Request
	for _, p := range pools.Items {
		if p.Spec.Backend.Type == kobev1.BackendKubernetes {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return out
}

// jobsRefusal says why this operator cannot run p's Job bundles, or ""
// when it can (bootstrap.JobsRefusal).
func (r *Reconciler) jobsRefusal(p *kobev1.ClusterPool) string {
	return bootstrap.JobsRefusal(r.BootstrapJobs, p.Spec.Backend.Type)
}

// capabilities asks the wired backend of type t what it can build; a type
// that is not wired has none (the planner then judges no backend field).
func (r *Reconciler) capabilities(t kobev1.BackendType) pool.Capabilities {
	b, ok := r.Backends.For(t)
	if !ok {
		return pool.Capabilities{}
	}
	c := b.Capabilities()
	out := pool.Capabilities{
		KubernetesVersions: slices.Clone(c.KubernetesVersions),
		MaxServers:         c.MaxServers,
		Scheduling:         c.Scheduling,
	}
	if f, ok := b.(backend.Freezer); ok {
		out.Freezing, out.FreezingRefusal = f.CanFreeze()
	}
	return out
}

// members lists the pool's ClusterInstances, including those bound to
// leases, from the cache (by index) or live (by label, r.APIReader);
// members of an earlier pool with the same name are not this pool's.
func (r *Reconciler) members(ctx context.Context, p *kobev1.ClusterPool, from client.Reader) ([]kobev1.ClusterInstance, error) {
	var list kobev1.ClusterInstanceList
	sel := client.ListOption(client.MatchingFields{index.InstancePool: p.Name})
	if from != r.Client {
		sel = client.MatchingLabels{kobev1.LabelPool: p.Name}
	}
	if err := from.List(ctx, &list, client.InNamespace(p.Namespace), sel); err != nil {
		return nil, fmt.Errorf("listing members of pool %s: %w", p.Name, err)
	}
	return slices.DeleteFunc(list.Items, func(m kobev1.ClusterInstance) bool {
		return m.Spec.PoolRef.UID != "" && m.Spec.PoolRef.UID != p.UID
	}), nil
}

// leases lists the leases naming the pool from the cache, by byPool: the
// active ones (index.ActiveLeasePool, its queue) or all of them
// (index.LeasePool, its demand).
func (r *Reconciler) leases(ctx context.Context, p *kobev1.ClusterPool, byPool string) ([]kobev1.ClusterLease, error) {
	var list kobev1.ClusterLeaseList
	if err := r.Client.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingFields{byPool: p.Name}); err != nil {
		return nil, fmt.Errorf("listing leases of pool %s: %w", p.Name, err)
	}
	return list.Items, nil
}

// bundles reads the pool's BootstrapConfigs from the cache and returns
// their content digests by name; a bundle that does not exist is left out
// (its members wait for it, and its creation changes the template). jobs
// names the bundles that run a Job this operator cannot run for p.
func (r *Reconciler) bundles(ctx context.Context, p *kobev1.ClusterPool) (digests map[string]string, jobs []string, err error) {
	if len(p.Spec.Bootstraps) == 0 {
		return nil, nil, nil
	}
	out := make(map[string]string, len(p.Spec.Bootstraps))
	for _, ref := range p.Spec.Bootstraps {
		bc := &kobev1.BootstrapConfig{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}, bc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading BootstrapConfig %s of pool %s: %w", ref.Name, p.Name, err)
		}
		out[ref.Name] = pool.BundleDigest(bc)
		if bc.Spec.Job != nil && r.jobsRefusal(p) != "" {
			jobs = append(jobs, ref.Name)
		}
	}
	return out, jobs, nil
}

// poolsOfBundle wakes the pools that name a BootstrapConfig: a change to its
// content is a change of their template.
func (r *Reconciler) poolsOfBundle(ctx context.Context, o client.Object) []reconcile.Request {
	var pools kobev1.ClusterPoolList
	if err := r.Client.List(ctx, &pools, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the pools of a BootstrapConfig", "bootstrapConfig", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, p := range pools.Items {
		if slices.ContainsFunc(p.Spec.Bootstraps, func(ref kobev1.BootstrapRef) bool { return ref.Name == o.GetName() }) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return out
}

// SetupWithManager registers the controller: it watches pools, their
// members (by label, since a bound member's owner is its lease) and the
// leases naming them; each event wakes only the pool it names. The
// index.InstancePool, index.ActiveLeasePool and index.LeasePool cache indexes must be registered
// on mgr (index.Setup). It fails when a required dependency is missing.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.validate(); err != nil {
		return err
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 4
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		For(&kobev1.ClusterPool{}).
		Watches(&kobev1.ClusterInstance{}, handler.EnqueueRequestsFromMapFunc(poolOfMember),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: memberChanged})).
		// A member of a capped type that goes away frees a place on the
		// host for the pools of any namespace that the cap holds back.
		Watches(&kobev1.ClusterInstance{}, handler.EnqueueRequestsFromMapFunc(r.poolsHeldBack),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			})).
		Watches(&kobev1.ClusterLease{}, handler.EnqueueRequestsFromMapFunc(poolOfLease),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: queueChanged})).
		Watches(&kobev1.BootstrapConfig{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfBundle),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	if r.NetworkPolicy != nil {
		b = b.WatchesRawSource(source.Channel(r.NetworkPolicy.Changes(), handler.EnqueueRequestsFromMapFunc(r.kubernetesPools)))
	}
	return b.Complete(r)
}

// validate names every required dependency that is missing.
func (r *Reconciler) validate() error {
	return deps.Require(ControllerName, map[string]bool{
		"Client": r.Client == nil, "Recorder": r.Recorder == nil, "Backends": r.Backends == nil, "Clock": r.Clock == nil,
	})
}

// memberChanged filters out member updates the pool does not read: a
// successful health probe only moves status.lastHealthCheck.
func memberChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*kobev1.ClusterInstance)
	n, ok2 := e.ObjectNew.(*kobev1.ClusterInstance)
	if !ok1 || !ok2 {
		return true
	}
	was, is := o.Status.DeepCopy(), n.Status.DeepCopy()
	was.LastHealthCheck, is.LastHealthCheck = nil, nil
	return !equality.Semantic.DeepEqual(was, is) || !equality.Semantic.DeepEqual(o.Spec, n.Spec) ||
		!equality.Semantic.DeepEqual(o.Labels, n.Labels) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp)
}

// queueChanged filters out lease updates the pool does not read: of its
// leases, the pool reads only which of them wait in its queue.
func queueChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*kobev1.ClusterLease)
	n, ok2 := e.ObjectNew.(*kobev1.ClusterLease)
	if !ok1 || !ok2 {
		return true
	}
	return lease.IsQueued(o) != lease.IsQueued(n) || o.Spec.Pool != n.Spec.Pool
}

// poolOfMember maps a member to its own pool only, named by its label.
func poolOfMember(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[kobev1.LabelPool]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// poolOfLease maps a lease to the pool it asks for.
func poolOfLease(_ context.Context, o client.Object) []reconcile.Request {
	l, ok := o.(*kobev1.ClusterLease)
	if !ok || l.Spec.Pool == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}}}
}
