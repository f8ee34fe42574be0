package clusterinstance

import (
	"context"

	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// ControllerName names the controller, its events' reporter and its field manager.
const ControllerName = "kobe-clusterinstance"

// Reconciler drives one ClusterInstance through Creating, Ready, Leased and
// Recycling, and destroys it.
type Reconciler struct {
	Client client.Client
	// APIReader reads around the cache where a stale read would do harm:
	// access Secrets (never cached), a lease that looks ended, the pool whose
	// failure counter is incremented.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	// Recorder is from mgr.GetEventRecorder(ControllerName).
	Recorder events.EventRecorder
	Backends backend.Registry
	Clock    clock.PassiveClock

	// PollInterval is how often a Creating member is observed; 2s when zero.
	PollInterval time.Duration
	// ProbeTimeout bounds each readiness-gate request and health probe; 5s
	// when zero (and never longer than the pool's health interval).
	ProbeTimeout time.Duration
	// MaxConcurrentReconciles; 4 when zero. Gates and probes wait on the
	// network, so one slow member must not hold up the others.
	MaxConcurrentReconciles int
}

// scope is one reconcile's view of an instance.
type scope struct {
	inst   *kobev1.ClusterInstance
	before *kobev1.ClusterInstance
	// pool is the instance's pool, nil when it is gone (or re-created).
	pool     *kobev1.ClusterPool
	backend  backend.Backend
	settings settings
	now      time.Time
	log      logr.Logger
	// gone is set once the object has been let go; nothing is patched then.
	gone bool
	// stale is set when a status patch met a newer object: stop and decide again.
	stale bool
}

func (s *scope) member() backend.Member {
	return backend.Member{Namespace: s.inst.Namespace, Name: s.inst.Name, UID: s.inst.UID, Pool: s.inst.Spec.PoolRef.Name, Spec: s.inst.Spec}
}

// Reconcile moves the instance one step along its life.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	inst := &kobev1.ClusterInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, inst); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s, err := r.newScope(ctx, inst)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer func() {
		retErr = errors.Join(retErr, r.commit(ctx, s))
		if s.stale && retErr == nil {
			// Someone (the binder, a gate publisher) wrote meanwhile: decide again.
			res = ctrl.Result{RequeueAfter: time.Second}
		}
	}()

	if !inst.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if controllerutil.AddFinalizer(inst, kobev1.FinalizerInstance) {
		if err := r.Client.Patch(ctx, inst, client.MergeFromWithOptions(s.before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
		s.before = inst.DeepCopy()
	}
	if s.backend == nil {
		return r.backendNotWired(ctx, s)
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
		return r.recycle(ctx, s, kobev1.ReasonLeaseEnded, "member is Leased but names no lease", false)
	case kobev1.InstanceRecycling:
		return r.deleteInstance(ctx, s)
	}
	return ctrl.Result{}, nil // Quarantined: kept for inspection, never touched.
}

func (r *Reconciler) newScope(ctx context.Context, inst *kobev1.ClusterInstance) (*scope, error) {
	s := &scope{inst: inst, before: inst.DeepCopy(), now: r.Clock.Now(), log: ctrl.LoggerFrom(ctx)}
	pool := &kobev1.ClusterPool{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: inst.Namespace, Name: inst.Spec.PoolRef.Name}, pool)
	switch {
	case err == nil && (inst.Spec.PoolRef.UID == "" || pool.UID == inst.Spec.PoolRef.UID):
		s.pool = pool
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("getting pool %s: %w", inst.Spec.PoolRef.Name, err)
	}
	s.settings = settingsFor(s.pool)
	if b, ok := r.Backends.For(inst.Spec.Backend.Type); ok {
		s.backend = b
	}
	return s, nil
}

// SetupWithManager registers the controller: it watches ClusterInstances and
// the ClusterLeases bound to them, so that a release is noticed at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}
	workers := r.MaxConcurrentReconciles
	if workers <= 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&kobev1.ClusterInstance{}).
		Watches(&kobev1.ClusterLease{}, handler.EnqueueRequestsFromMapFunc(r.instancesOfLease)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
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
	if err := r.Client.List(ctx, &list, client.InNamespace(l.Namespace), client.MatchingLabels{kobev1.LabelLease: l.Name}); err == nil {
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
