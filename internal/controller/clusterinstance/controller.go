package clusterinstance

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/controller/conditions"
	"github.com/kunobi-ninja/kobe/internal/controller/deps"
	"github.com/kunobi-ninja/kobe/internal/controller/ownwrites"
	"github.com/kunobi-ninja/kobe/internal/controller/patch"
	"github.com/kunobi-ninja/kobe/internal/controller/seen"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/leadership"
)

// ControllerName names the controller, its events' reporter and its field manager.
const ControllerName = "kobe-clusterinstance"

// Reconciler drives one ClusterInstance through Creating, Ready, Leased and
// Recycling, and destroys it.
type Reconciler struct {
	Client client.Client
	// APIReader reads around the cache where a stale read would do harm:
	// the member's admin kubeconfig (the cache drops it), a lease that looks ended, the pool whose
	// failure streak is counted or reset.
	// Default: mgr.GetAPIReader().
	APIReader client.Reader
	// Recorder is from mgr.GetEventRecorder(ControllerName). Required.
	Recorder events.EventRecorder
	// Backends are the wired backends. Required (it may be empty: members
	// then report BackendUnavailable).
	Backends backend.Registry
	// Clock is the time every decision is made at. Required.
	Clock clock.PassiveClock
	// Access seals each member's access material into its status and opens
	// it again (memberaccess.LoadOrCreateKey). Required.
	Access *memberaccess.Sealer

	// PollInterval is how often a Creating member is observed; 2s when zero.
	PollInterval time.Duration
	// ProbeTimeout bounds each readiness-gate request and health probe; 5s
	// when zero (and never longer than the pool's health interval).
	ProbeTimeout time.Duration
	// NodeProbeImage is the image of the probe pods the NodesReady gate
	// starts on the real nodes of a member: the pause image those nodes
	// preload (the local backend's --local-pause-image).
	// gates.DefaultProbeImage when empty.
	NodeProbeImage string
	// BootstrapJobs: run the Jobs of BootstrapConfigs for kubernetes
	// backend members (the host cluster has nodes). Without it a member
	// meeting a Job bundle fails.
	BootstrapJobs bool
	// ReceiptRetention is how long cleanup receipts are kept;
	// cleanup.DefaultRetention (30 days) when zero.
	ReceiptRetention time.Duration
	// MaxConcurrentReconciles; 4 when zero. Gates and probes wait on the
	// network, so one slow member must not hold up the others.
	MaxConcurrentReconciles int
	// Leadership says whether this replica surely still leads; while it is
	// not sure (a leader resumed after a pause), members are left as they
	// are. Optional: nil acts always (no leader election).
	Leadership leadership.Checker

	// finalized remembers the members whose finalizer this replica removed;
	// fenced, the members it fenced; deleted, the members it deleted.
	finalized, fenced, deleted seen.Set
	// ownWrites holds a member's reconcile until this replica's last write
	// of it is in the cache (set up by SetupWithManager).
	ownWrites *ownwrites.Tracker
}

// scope is one reconcile's view of an instance.
type scope struct {
	inst *kobev1.ClusterInstance
	// patch holds the snapshot of inst and writes its status once, fenced;
	// once it is Done (gone or stale) nothing more is written.
	patch *patch.Helper
	// conds sets conditions at now and tells reason changes as events.
	conds conditions.Setter
	// pool is the instance's pool, nil when it is gone (or re-created).
	pool     *kobev1.ClusterPool
	backend  backend.Backend
	settings settings
	now      time.Time
	log      logr.Logger
}

func (s *scope) member() backend.Member {
	return backend.MemberOf(s.inst)
}

// Reconcile moves the instance one step along its life: get, scope, one
// deferred fenced status patch, the finalizer, then the step of its phase.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	inst := &kobev1.ClusterInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, inst); err != nil {
		if apierrors.IsNotFound(err) {
			r.finalized.Forget(req.NamespacedName)
			r.fenced.Forget(req.NamespacedName)
			r.deleted.Forget(req.NamespacedName)
			r.ownWrites.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !leadership.Certain(r.Leadership) {
		// Another replica may lead by now and act on this member too.
		return ctrl.Result{RequeueAfter: leadership.Recheck}, nil
	}
	if wait := r.ownWrites.Behind(req.NamespacedName, inst.ResourceVersion); wait > 0 {
		// The cache still shows the member as it was before this
		// replica's last write: deciding now would repeat that write (a
		// 409). Its event wakes the member; the requeue is the bound.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if r.finalized.Has(req.NamespacedName, inst.UID) {
		// The cache still holds a member whose finalizer this replica
		// removed: finalizing it again would only write to an object
		// that is gone (two writes kube-apiserver serves, and answers 404).
		return ctrl.Result{}, nil
	}
	if inst.DeletionTimestamp.IsZero() && r.deleted.Has(req.NamespacedName, inst.UID) {
		// The cache does not show this replica's delete of the member yet
		// (a lease's end and the member's own event both woke it): deciding
		// now would delete it again, a write kube-apiserver serves for
		// nothing. The delete's event wakes it; the requeue is the bound.
		return ctrl.Result{RequeueAfter: ownwrites.DefaultMaxWait}, nil
	}
	s, err := r.newScope(ctx, inst)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Someone (the binder, a gate publisher) may write meanwhile: a stale
	// patch is dropped and the reconcile decides again shortly.
	readRV := inst.ResourceVersion
	defer func() {
		res, retErr = s.patch.Finish(ctx, res, retErr)
		switch {
		case s.patch.Gone():
			r.ownWrites.Forget(req.NamespacedName)
		case inst.ResourceVersion != readRV:
			r.ownWrites.Wrote(req.NamespacedName, inst.ResourceVersion)
		}
	}()

	if !inst.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if err := s.patch.AddFinalizer(ctx, kobev1.FinalizerInstance); err != nil || s.patch.Done() {
		return ctrl.Result{}, err
	}
	if s.backend == nil {
		return r.backendNotWired(ctx, s)
	}
	refused, err := r.guardHost(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refused != "" {
		return r.reconcileElsewhere(ctx, s, refused)
	}
	if inst.Status.AccessSecretRef != nil && inst.Status.Access == nil &&
		inst.Status.Phase != kobev1.InstanceRecycling && inst.Status.Phase != kobev1.InstanceQuarantined {
		return r.moveLegacyAccess(ctx, s)
	}
	if inst.Spec.LeaseRef != nil && inst.Status.Phase != kobev1.InstanceRecycling && inst.Status.Phase != kobev1.InstanceQuarantined {
		return r.reconcileLeased(ctx, s)
	}
	switch inst.Status.Phase {
	case "":
		r.setPhase(s, kobev1.InstanceCreating, kobev1.ReasonCreating, "the backend is building the member")
		return r.reconcileCreating(ctx, s)
	case kobev1.InstanceCreating:
		return r.reconcileCreating(ctx, s)
	case kobev1.InstanceReady:
		return r.reconcileReady(ctx, s)
	case kobev1.InstanceLeased:
		// A Leased phase without spec.leaseRef cannot happen (leaseRef is
		// write-once); treat it as a lease that ended.
		return r.recycle(ctx, s, kobev1.ReasonLeaseEnded, "member is Leased but names no lease")
	case kobev1.InstanceRecycling:
		return r.recycleAgain(ctx, s)
	}
	return ctrl.Result{}, nil // Quarantined: kept for inspection, never touched.
}

func (r *Reconciler) newScope(ctx context.Context, inst *kobev1.ClusterInstance) (*scope, error) {
	now := r.Clock.Now()
	s := &scope{inst: inst, patch: patch.New(r.Client, inst), conds: conditions.Setter{Recorder: r.Recorder, Now: now},
		now: now, log: ctrl.LoggerFrom(ctx)}
	pool := &kobev1.ClusterPool{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: inst.Namespace, Name: inst.Spec.PoolRef.Name}, pool)
	switch {
	case err == nil && (inst.Spec.PoolRef.UID == "" || pool.UID == inst.Spec.PoolRef.UID):
		s.pool = pool
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("getting pool %s: %w", inst.Spec.PoolRef.Name, err)
	}
	s.settings = settingsFor(s.pool, inst)
	if b, ok := r.Backends.For(inst.Spec.Backend.Type); ok {
		s.backend = b
	}
	return s, nil
}

// SetupWithManager registers the controller: it watches ClusterInstances and
// the ClusterLeases bound to them, so that a release is noticed at once.
// It fails when a required dependency is missing.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.validate(); err != nil {
		return err
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.ownWrites = ownwrites.New(r.Clock, 0)
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&kobev1.ClusterInstance{}, builder.WithPredicates(r.ownWrites.Predicate())).
		Watches(&kobev1.ClusterInstance{}, newMembersFirst()).
		Watches(&kobev1.ClusterLease{}, handler.EnqueueRequestsFromMapFunc(r.instancesOfLease)).
		Watches(&kobev1.ClusterLease{}, endedLeasesFirst(r.instancesOfLease)).
		Watches(&kobev1.ClusterPool{}, handler.EnqueueRequestsFromMapFunc(countedMembers)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// validate names every required dependency that is missing.
func (r *Reconciler) validate() error {
	return deps.Require(ControllerName, map[string]bool{
		"Client": r.Client == nil, "Recorder": r.Recorder == nil, "Backends": r.Backends == nil, "Clock": r.Clock == nil,
		"Access": r.Access == nil,
	})
}

// countedMembers maps a pool to the failed members its status names as
// counted: each waits for that before its finalizer goes (countWait).
func countedMembers(_ context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*kobev1.ClusterPool)
	if !ok {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(p.Status.CountedFailures))
	for _, name := range p.Status.CountedFailures {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: name}})
	}
	return reqs
}

// instancesOfLease maps a lease to the member it holds (status.instanceRef)
// and to any member labelled with it by the binder.
func (r *Reconciler) instancesOfLease(ctx context.Context, o client.Object) []reconcile.Request {
	l, ok := o.(*kobev1.ClusterLease)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	var out []reconcile.Request
	add := func(name string) {
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: l.Namespace, Name: name}})
		}
	}
	if l.Status.InstanceRef != nil {
		add(l.Status.InstanceRef.Name)
	}
	var list kobev1.ClusterInstanceList
	// By index, not by label: a label selector scans every member of the
	// namespace in the cache, an index only this lease's.
	if err := r.Client.List(ctx, &list, client.InNamespace(l.Namespace), client.MatchingFields{index.InstanceLeaseUID: string(l.UID)}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the members of a lease", "lease", l.Name)
	} else {
		for i := range list.Items {
			add(list.Items[i].Name)
		}
	}
	return out
}

func (r *Reconciler) pollInterval() time.Duration {
	if r.PollInterval > 0 {
		return r.PollInterval
	}
	return 2 * time.Second
}

func (r *Reconciler) probeTimeout(s *scope) time.Duration {
	t := r.ProbeTimeout
	if t <= 0 {
		t = 5 * time.Second
	}
	return min(t, s.settings.interval)
}
