package clusterlease_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// The lease controller runs alone against a real API server; members are
// ClusterInstances whose phase the test sets, as the instance controller
// would.
type harness struct {
	t *testing.T
	c client.Client
	n int
}

var shared struct {
	c client.Client
}

// TestMain runs one control plane and one lease controller for every test;
// tests keep apart by using their own pools.
func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "clusterlease-")
	if err != nil {
		panic(err)
	}
	env, stop, err := testenv.New(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	code := func() int {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
			Scheme:  env.Scheme,
			Metrics: metricsserver.Options{BindAddress: "0"},
			Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{"default": {}}},
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := index.Setup(ctx, mgr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		clk := clock.RealClock{}
		r := &clusterlease.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			Binder:   &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk},
			Recorder: mgr.GetEventRecorder("test"), Clock: clk,
			Retention: time.Hour, RepairGrace: 2 * time.Second,
		}
		if err := r.SetupWithManager(mgr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() { _ = mgr.Start(ctx) }()
		shared.c = env.Client
		return m.Run()
	}()
	cancel()
	_ = stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func start(t *testing.T) *harness { return &harness{t: t, c: shared.c} }

func (h *harness) pool(name string, queueTimeout time.Duration) {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if queueTimeout > 0 {
		p.Spec.Scaling = &kobev1.ScalingSpec{MinReady: ptr.To[int32](0), QueueTimeout: &metav1.Duration{Duration: queueTimeout}}
	}
	h.must(h.c.Create(h.t.Context(), p))
}

// member creates a Ready member of pool.
func (h *harness) member(pool string) *kobev1.ClusterInstance {
	h.n++
	inst := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-%s-%d", pool, h.n), Namespace: "default", Labels: map[string]string{kobev1.LabelPool: pool}},
		Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: pool}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
	}
	h.must(h.c.Create(h.t.Context(), inst))
	inst.Status.Phase = kobev1.InstanceReady
	h.must(h.c.Status().Update(h.t.Context(), inst))
	return inst
}

func (h *harness) lease(name, pool string, ttl time.Duration) {
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: kobev1.ClusterLeaseSpec{Pool: pool, TTL: &metav1.Duration{Duration: ttl}}}
	h.must(h.c.Create(h.t.Context(), l))
	// Creation timestamps have one-second resolution; keep FIFO order unambiguous.
	time.Sleep(1100 * time.Millisecond)
}

func (h *harness) get(name string) *kobev1.ClusterLease {
	l := &kobev1.ClusterLease{}
	h.must(h.c.Get(h.t.Context(), types.NamespacedName{Namespace: "default", Name: name}, l))
	return l
}

func (h *harness) eventually(within time.Duration, what string, cond func() (bool, string)) {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; last: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

func phaseIs(h *harness, name string, phase kobev1.LeasePhase, pos int32) func() (bool, string) {
	return func() (bool, string) {
		l := h.get(name)
		return l.Status.Phase == phase && (pos < 0 || l.Status.QueuePosition == pos), fmt.Sprintf("%s pos %d", l.Status.Phase, l.Status.QueuePosition)
	}
}

func endedBecause(l *kobev1.ClusterLease) string {
	if c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded); c != nil {
		return c.Reason
	}
	return ""
}

// TestQueueIsFirstComeFirstServed: queued leases get positions in creation
// order, a lease deleted while queued does not block those behind it, and
// a member turning Ready goes to the head of the queue.
func TestQueueIsFirstComeFirstServed(t *testing.T) {
	h := start(t)
	h.pool("fifo", 0)
	for _, n := range []string{"first", "second", "third"} {
		h.lease(n, "fifo", time.Hour)
	}
	for i, n := range []string{"first", "second", "third"} {
		h.eventually(15*time.Second, n+" pending at its place", phaseIs(h, n, kobev1.LeasePending, int32(i+1)))
	}

	h.must(h.c.Delete(t.Context(), h.get("first")))
	h.eventually(40*time.Second, "second to move to the head", phaseIs(h, "second", kobev1.LeasePending, 1))
	h.eventually(40*time.Second, "third to move up", phaseIs(h, "third", kobev1.LeasePending, 2))

	inst := h.member("fifo")
	h.eventually(15*time.Second, "the head of the queue to bind", phaseIs(h, "second", kobev1.LeaseBound, 0))
	second := h.get("second")
	if second.Status.InstanceRef == nil || second.Status.InstanceRef.Name != inst.Name {
		t.Fatalf("second bound to %+v, want %s", second.Status.InstanceRef, inst.Name)
	}
	if got := second.Status.ExpiresAt.Sub(second.Status.BoundAt.Time); got != time.Hour {
		t.Errorf("expiresAt - boundAt = %s, want the lease's ttl 1h", got)
	}
	h.eventually(15*time.Second, "third to stay queued, now first", phaseIs(h, "third", kobev1.LeasePending, 1))
	fresh := &kobev1.ClusterInstance{}
	h.must(h.c.Get(t.Context(), client.ObjectKeyFromObject(inst), fresh))
	if !binding.Consistent(second, fresh) {
		t.Errorf("member does not point back at its lease: %+v", fresh.Spec.LeaseRef)
	}
}

// TestLeasesEnd: a bound lease ends at its expiry, a queued one after the
// pool's queue timeout, each with its reason; a VerifiedDestroy lease is
// refused before binding.
func TestLeasesEnd(t *testing.T) {
	h := start(t)
	h.pool("ends", 2*time.Second)
	h.member("ends")
	h.lease("short", "ends", 3*time.Second)
	h.eventually(15*time.Second, "short to bind", phaseIs(h, "short", kobev1.LeaseBound, -1))
	h.lease("waits", "ends", time.Hour)

	h.eventually(20*time.Second, "short to expire", phaseIs(h, "short", kobev1.LeaseExpired, -1))
	short := h.get("short")
	if r := endedBecause(short); r != kobev1.ReasonExpired {
		t.Errorf("short ended because %q, want Expired", r)
	}
	if late := short.Status.EndedAt.Sub(short.Status.ExpiresAt.Time); late < 0 || late > 3*time.Second {
		t.Errorf("short ended %s after its expiry", late)
	}

	h.eventually(20*time.Second, "waits to time out in the queue", phaseIs(h, "waits", kobev1.LeaseExpired, -1))
	if r := endedBecause(h.get("waits")); r != kobev1.ReasonQueueTimeout {
		t.Errorf("waits ended because %q, want QueueTimeout", r)
	}

	verified := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "verified", Namespace: "default"}, Spec: kobev1.ClusterLeaseSpec{Pool: "ends", CleanupMode: kobev1.CleanupVerifiedDestroy}}
	h.member("ends")
	h.must(h.c.Create(t.Context(), verified))
	h.eventually(20*time.Second, "the VerifiedDestroy lease to be refused", phaseIs(h, "verified", kobev1.LeaseReleased, -1))
	v := h.get("verified")
	if r := endedBecause(v); r != kobev1.ReasonCleanupModeUnsupported || v.Status.InstanceRef != nil {
		t.Errorf("verified: reason %q, instance %+v; want CleanupModeUnsupported and never bound", r, v.Status.InstanceRef)
	}
}

// TestInterruptedBindIsCompleted: a lease that claims a member whose side of
// the bind was never written (the binder crashed) is completed by the
// controller after the repair grace.
func TestInterruptedBindIsCompleted(t *testing.T) {
	h := start(t)
	h.pool("crash", 0)
	inst := h.member("crash")
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "halfway", Namespace: "default"}, Spec: kobev1.ClusterLeaseSpec{Pool: "crash", TTL: &metav1.Duration{Duration: time.Hour}}}
	h.must(h.c.Create(t.Context(), l))
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	exp := metav1.NewTime(now.Add(time.Hour))
	l.Status = kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: inst.Name, UID: inst.UID}, BoundAt: &now, ExpiresAt: &exp}
	h.must(h.c.Status().Update(t.Context(), l))

	h.eventually(20*time.Second, "the member side to be written", func() (bool, string) {
		fresh := &kobev1.ClusterInstance{}
		h.must(h.c.Get(t.Context(), client.ObjectKeyFromObject(inst), fresh))
		return binding.Consistent(h.get("halfway"), fresh), fmt.Sprintf("%+v", fresh.Spec.LeaseRef)
	})
	if got := h.get("halfway"); got.Status.Phase != kobev1.LeaseBound || !got.Status.ExpiresAt.Equal(&exp) {
		t.Errorf("lease after repair: %+v, want still Bound with its expiry", got.Status)
	}
}
