//go:build integration

package clusterlease_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// The lease controller runs alone against a real API server; members are
// ClusterInstances whose phase the test sets, as the instance controller
// would.
type harness struct {
	t  *testing.T
	c  client.Client
	ns string
	n  int
}

var shared struct {
	env *testenv.Env
	// fenced records, by member name, when the lease controller asked to
	// fence it (Reconciler.Fence).
	fencedMu sync.Mutex
	fenced   map[string][]time.Time
}

// recordFence is the shared lease controller's Reconciler.Fence.
func recordFence(_ context.Context, inst *kobev1.ClusterInstance) error {
	shared.fencedMu.Lock()
	defer shared.fencedMu.Unlock()
	shared.fenced[inst.Name] = append(shared.fenced[inst.Name], time.Now())
	return nil
}

// fencesOf returns when the member named name was fenced.
func fencesOf(name string) []time.Time {
	shared.fencedMu.Lock()
	defer shared.fencedMu.Unlock()
	return slices.Clone(shared.fenced[name])
}

// TestMain runs one control plane and one lease controller (watching
// namespace default) for every test; tests keep apart by using their own
// pools, or their own namespace and manager.
func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "clusterlease-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(dir) }()
		env, stopEnv, err := testenv.New(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = stopEnv() }()
		mgr, err := ctrl.NewManager(env.Config, env.ManagerOptions("default"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := index.Setup(context.Background(), mgr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		clk := clock.RealClock{}
		r := &clusterlease.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			Binder:   &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk},
			Recorder: mgr.GetEventRecorder("test"), Clock: clk,
			Retention: time.Hour, Fence: recordFence,
		}
		shared.fenced = map[string][]time.Time{}
		if err := r.SetupWithManager(mgr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		stopMgr, err := testenv.RunManager(mgr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = stopMgr() }()
		shared.env = env
		return m.Run()
	}())
}

func start(t *testing.T) *harness { return &harness{t: t, c: shared.env.Client, ns: "default"} }

func (h *harness) pool(name string, queueTimeout time.Duration) {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if queueTimeout > 0 {
		p.Spec.Scaling = &kobev1.ScalingSpec{MinReady: ptr.To[int32](0), QueueTimeout: &metav1.Duration{Duration: queueTimeout}}
	}
	h.must(h.c.Create(h.t.Context(), p))
}

// member creates a Ready member of pool.
func (h *harness) member(pool string) *kobev1.ClusterInstance {
	h.n++
	inst := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-%s-%d", pool, h.n), Namespace: h.ns, Labels: map[string]string{kobev1.LabelPool: pool}},
		Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: pool}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
	}
	h.must(h.c.Create(h.t.Context(), inst))
	inst.Status.Phase = kobev1.InstanceReady
	h.must(h.c.Status().Update(h.t.Context(), inst))
	return inst
}

// lease creates a lease queued now, stamped as the HTTP API stamps it, so
// that leases created one after the other keep their order below one second.
func (h *harness) lease(name, pool string, ttl time.Duration) {
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Spec: kobev1.ClusterLeaseSpec{Pool: pool, TTL: &metav1.Duration{Duration: ttl}}}
	lease.StampQueuedAt(l, time.Now())
	h.must(h.c.Create(h.t.Context(), l))
}

func (h *harness) get(name string) *kobev1.ClusterLease {
	l := &kobev1.ClusterLease{}
	h.must(h.c.Get(h.t.Context(), types.NamespacedName{Namespace: h.ns, Name: name}, l))
	return l
}

func (h *harness) eventually(within time.Duration, what string, cond func() error) {
	h.t.Helper()
	testenv.Eventually(h.t, within, what, cond)
}

func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// phaseIs is a condition for eventually: the lease is in phase, at queue
// position pos unless pos < 0.
func phaseIs(h *harness, name string, phase kobev1.LeasePhase, pos int32) func() error {
	return func() error {
		l := &kobev1.ClusterLease{}
		if err := h.c.Get(h.t.Context(), types.NamespacedName{Namespace: h.ns, Name: name}, l); err != nil {
			return err
		}
		if l.Status.Phase == phase && (pos < 0 || l.Status.QueuePosition == pos) {
			return nil
		}
		return fmt.Errorf("%s is %s at position %d", name, l.Status.Phase, l.Status.QueuePosition)
	}
}

func endedBecause(l *kobev1.ClusterLease) string {
	if c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded); c != nil {
		return c.Reason
	}
	return ""
}

// TestQueueIsFirstComeFirstServed: queued leases get positions in the order
// they were queued, a lease deleted while queued moves those behind it up at
// once, and a member turning Ready goes to the head of the queue.
func TestQueueIsFirstComeFirstServed(t *testing.T) {
	h := start(t)
	h.pool("fifo", 0)
	for _, n := range []string{"first", "second", "third"} {
		h.lease(n, "fifo", time.Hour)
	}
	for i, n := range []string{"first", "second", "third"} {
		h.eventually(15*time.Second, n+" pending at its place", phaseIs(h, n, kobev1.LeasePending, int32(i+1)))
	}

	// The deletion itself moves the queue up, well before the 30s periodic look.
	h.must(h.c.Delete(t.Context(), h.get("first")))
	h.eventually(10*time.Second, "second to move to the head", phaseIs(h, "second", kobev1.LeasePending, 1))
	h.eventually(10*time.Second, "third to move up", phaseIs(h, "third", kobev1.LeasePending, 2))

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

// TestQueueMovesArePaced: a lease whose place moves three times within
// lease.PositionEvery of its mark has its status written once for them, at
// its final place, not once per move (issue 27: one status write per
// transition, never one per observation). Without the pacing it was written
// at 3, 2 and 1.
func TestQueueMovesArePaced(t *testing.T) {
	h := start(t)
	h.pool("paced", 0)
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		h.lease(n, "paced", time.Hour)
	}
	for i, n := range names {
		h.eventually(15*time.Second, n+" pending at its place", phaseIs(h, n, kobev1.LeasePending, int32(i+1)))
	}
	d := h.get("d")
	var writes []int32
	wc, err := client.NewWithWatch(shared.env.Config, client.Options{Scheme: shared.env.Scheme})
	h.must(err)
	w, err := wc.Watch(t.Context(), &kobev1.ClusterLeaseList{}, client.InNamespace(h.ns),
		client.MatchingFields{"metadata.name": "d"}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: d.ResourceVersion}})
	h.must(err)
	defer w.Stop()
	for _, n := range names[:3] {
		h.must(h.c.Delete(t.Context(), h.get(n)))
	}
	deadline := time.After(lease.PositionEvery + 10*time.Second)
	for len(writes) == 0 || writes[len(writes)-1] != 1 {
		select {
		case ev := <-w.ResultChan():
			if l, ok := ev.Object.(*kobev1.ClusterLease); ok {
				writes = append(writes, l.Status.QueuePosition)
			}
		case <-deadline:
			t.Fatalf("d's status was written at positions %v, never at 1", writes)
		}
	}
	if len(writes) != 1 {
		t.Fatalf("d's status was written at positions %v: once per move, want once at 1", writes)
	}
}

// TestQueueOrderFollowsQueuedAt: two leases created within the
// same second queue in the order of their queued-at stamps, whatever their
// names and creation order; a lease without the stamp (made with kubectl)
// queues at its creationTimestamp.
func TestQueueOrderFollowsQueuedAt(t *testing.T) {
	h := start(t)
	h.pool("subsecond", 0)
	base := time.Now()
	// Two requests stamped 700ms apart whose creates landed in the opposite
	// order: by creation time or by name, a-late would come first.
	mk := func(name string, queued *time.Time) *kobev1.ClusterLease {
		l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Spec: kobev1.ClusterLeaseSpec{Pool: "subsecond", TTL: &metav1.Duration{Duration: time.Hour}}}
		if queued != nil {
			lease.StampQueuedAt(l, *queued)
		}
		h.must(h.c.Create(t.Context(), l))
		return l
	}
	late, early := base.Add(800*time.Millisecond), base.Add(100*time.Millisecond)
	aLate := mk("a-late", &late)
	zEarly := mk("z-early", &early)
	if d := zEarly.CreationTimestamp.Sub(aLate.CreationTimestamp.Time); d < 0 || d > time.Second {
		t.Fatalf("creationTimestamps %s and %s are not within one second in creation order", aLate.CreationTimestamp, zEarly.CreationTimestamp)
	}
	// Created once a-late's stamp is more than a second past: its
	// creationTimestamp (truncated to the second) is then after that stamp.
	time.Sleep(time.Until(late.Add(1100 * time.Millisecond)))
	mk("0-kubectl", nil)

	h.eventually(15*time.Second, "z-early at the head", phaseIs(h, "z-early", kobev1.LeasePending, 1))
	h.eventually(15*time.Second, "a-late second", phaseIs(h, "a-late", kobev1.LeasePending, 2))
	h.eventually(15*time.Second, "the kubectl lease last", phaseIs(h, "0-kubectl", kobev1.LeasePending, 3))

	h.member("subsecond")
	h.eventually(15*time.Second, "z-early to bind first", phaseIs(h, "z-early", kobev1.LeaseBound, 0))
	h.eventually(15*time.Second, "a-late now at the head", phaseIs(h, "a-late", kobev1.LeasePending, 1))
	if l := h.get("a-late"); l.Status.InstanceRef != nil {
		t.Errorf("a-late holds %s, want nothing", l.Status.InstanceRef.Name)
	}
}

// TestLeasesEnd: a bound lease ends at its expiry, a queued one after the
// pool's queue timeout, each with its reason; a VerifiedDestroy lease is
// refused before binding.
func TestLeasesEnd(t *testing.T) {
	h := start(t)
	h.pool("ends", 2*time.Second)
	held := h.member("ends")
	h.lease("short", "ends", 3*time.Second)
	h.eventually(15*time.Second, "short to bind", phaseIs(h, "short", kobev1.LeaseBound, -1))
	h.lease("waits", "ends", time.Hour)
	if f := fencesOf(held.Name); len(f) != 0 {
		t.Errorf("member %s fenced while its lease is bound: %v", held.Name, f)
	}

	h.eventually(20*time.Second, "short to expire", phaseIs(h, "short", kobev1.LeaseExpired, -1))
	short := h.get("short")
	if r := endedBecause(short); r != kobev1.ReasonExpired {
		t.Errorf("short ended because %q, want Expired", r)
	}
	if late := short.Status.EndedAt.Sub(short.Status.ExpiresAt.Time); late < 0 || late > 3*time.Second {
		t.Errorf("short ended %s after its expiry", late)
	}
	if c := meta.FindStatusCondition(short.Status.Conditions, kobev1.ConditionBound); c == nil || c.Status != metav1.ConditionFalse || c.Reason != kobev1.ReasonExpired {
		t.Errorf("short's Bound condition after it ended = %+v, want False Expired", c)
	}
	// The lease controller cuts access itself as the end lands, without
	// waiting for the member's teardown (there is no instance controller
	// here to do it).
	h.eventually(5*time.Second, "short's member fenced", func() error {
		if f := fencesOf(held.Name); len(f) != 1 || f[0].Before(short.Status.EndedAt.Truncate(time.Second)) {
			return fmt.Errorf("fenced at %v, ended at %s; want once, after the end", f, short.Status.EndedAt)
		}
		return nil
	})

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
	if v.Status.ObservedGeneration != v.Generation {
		t.Errorf("verified: observedGeneration %d, generation %d", v.Status.ObservedGeneration, v.Generation)
	}
}

// TestForgedStatusIsRecycled: a lease whose status is made to
// point at a Ready member by a direct status write (as anyone with
// clusterleases/status could) does not hold it: the member is recycled
// (deleted, for the instance controller to destroy), never bound, and the
// lease is queued again and bound properly to the next Ready member.
func TestForgedStatusIsRecycled(t *testing.T) {
	h := start(t)
	h.pool("forge", 0)
	victim := h.member("forge")
	h.lease("forger", "forge", time.Hour)
	h.eventually(15*time.Second, "forger to bind to the only member", phaseIs(h, "forger", kobev1.LeaseBound, -1))
	// A second lease, forged onto a second Ready member.
	target := h.member("forge")
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: h.ns}, Spec: kobev1.ClusterLeaseSpec{Pool: "forge-other", TTL: &metav1.Duration{Duration: time.Hour}}}
	h.must(h.c.Create(t.Context(), l))
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	exp := metav1.NewTime(now.Add(time.Hour))
	h.forge(l, kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: target.Name, UID: target.UID}, BoundAt: &now, ExpiresAt: &exp})

	h.eventually(20*time.Second, "the forged-onto member to be recycled", func() error {
		fresh := &kobev1.ClusterInstance{}
		err := h.c.Get(t.Context(), client.ObjectKeyFromObject(target), fresh)
		if apierrors.IsNotFound(err) || (err == nil && fresh.DeletionTimestamp != nil) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("member %s: phase %s, leaseRef %+v", fresh.Name, fresh.Status.Phase, fresh.Spec.LeaseRef)
	})
	h.eventually(15*time.Second, "the forged lease to be queued again", phaseIs(h, "forged", kobev1.LeasePending, -1))
	if got := h.get("forged"); got.Status.InstanceRef != nil {
		t.Errorf("forged lease still names %s", got.Status.InstanceRef.Name)
	}
	// A forged status on a lease that has ended names another member.
	third := h.member("forge")
	ended := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "forged-ended", Namespace: h.ns}, Spec: kobev1.ClusterLeaseSpec{Pool: "forge-other"}}
	h.must(h.c.Create(t.Context(), ended))
	h.forge(ended, kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseReleased, EndedAt: &now, InstanceRef: &kobev1.ObjectRef{Name: third.Name, UID: third.UID}})
	h.eventually(20*time.Second, "the member an ended lease's forged status names to be recycled", func() error {
		fresh := &kobev1.ClusterInstance{}
		err := h.c.Get(t.Context(), client.ObjectKeyFromObject(third), fresh)
		if apierrors.IsNotFound(err) || (err == nil && fresh.DeletionTimestamp != nil) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("member %s: phase %s, leaseRef %+v", fresh.Name, fresh.Status.Phase, fresh.Spec.LeaseRef)
	})

	// The legitimate bind was left alone.
	if fresh := (&kobev1.ClusterInstance{}); h.c.Get(t.Context(), client.ObjectKeyFromObject(victim), fresh) != nil || !binding.Consistent(h.get("forger"), fresh) {
		t.Errorf("the legitimate bind of forger changed: %+v", fresh.Spec.LeaseRef)
	}
}

// forge writes st as l's status, as anyone with clusterleases/status could,
// over whatever the controller wrote meanwhile.
func (h *harness) forge(l *kobev1.ClusterLease, st kobev1.ClusterLeaseStatus) {
	h.t.Helper()
	h.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := h.get(l.Name)
		cur.Status = st
		return h.c.Status().Update(h.t.Context(), cur)
	}))
}

// TestBindRecordedFromMember: a lease whose member names it but whose
// status copy was never written (the API answered, then crashed before its
// deferred write) is recorded by the controller from the member once the
// fast path's grace is over, not bound again; with two members naming it (a
// claim the API server applied after its binder gave up) the copy names the
// earliest bind.
func TestBindRecordedFromMember(t *testing.T) {
	h := start(t)
	h.pool("crash", 0)
	first, second := h.member("crash"), h.member("crash")
	spare := h.member("crash")
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "answered", Namespace: h.ns, Annotations: map[string]string{kobev1.AnnotationFastPath: "true"}},
		Spec:       kobev1.ClusterLeaseSpec{Pool: "crash", TTL: &metav1.Duration{Duration: time.Hour}},
	}
	lease.StampQueuedAt(l, time.Now())
	h.must(h.c.Create(t.Context(), l))
	boundAt := time.Now().Add(-2 * time.Second).Truncate(time.Second)
	for i, m := range []*kobev1.ClusterInstance{first, second} {
		binding.SetMemberBinding(m, l, boundAt.Add(time.Duration(i)*time.Second))
		h.must(h.c.Update(t.Context(), m))
	}
	// Within the grace the controller leaves the lease to the fast path.
	testenv.Consistently(t, lease.InFlightGrace/2, "the controller to leave the lease to the fast path within its grace", func() error {
		if got := h.get("answered"); got.Status.Phase != "" {
			return fmt.Errorf("the controller wrote the lease within the fast path's grace: %+v", got.Status)
		}
		return nil
	})
	h.eventually(lease.InFlightGrace+15*time.Second, "the bind to be recorded", phaseIs(h, "answered", kobev1.LeaseBound, -1))
	got := h.get("answered")
	if got.Status.InstanceRef == nil || got.Status.InstanceRef.UID != first.UID {
		t.Fatalf("recorded %+v, want the earliest bind %s", got.Status.InstanceRef, first.Name)
	}
	if !got.Status.BoundAt.Time.Equal(boundAt) || got.Status.ExpiresAt.Sub(boundAt) != time.Hour {
		t.Errorf("boundAt %s, expiresAt %s; want %s and one hour later", got.Status.BoundAt, got.Status.ExpiresAt, boundAt)
	}
	if fresh := (&kobev1.ClusterInstance{}); h.c.Get(t.Context(), client.ObjectKeyFromObject(spare), fresh) != nil || fresh.Spec.LeaseRef != nil {
		t.Errorf("the lease was bound again, to %s", spare.Name)
	}
}
