//go:build heavy

package clusterpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterinstance"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
)

// Deadlines are generous: CI has two cores, and every member is a real
// etcd, kube-apiserver and kube-controller-manager.
const (
	memberReady = 3 * time.Minute
	shortWait   = 30 * time.Second
)

type harness struct {
	env      *testenv.Env
	c        client.Client
	dataRoot string
	local    *local.Backend
	// namespaces are those startHarness's manager watches, one per subtest.
	namespaces *testenv.Namespaces
}

// harnessNamespaces is how many namespaces startHarness makes for its
// subtests: its manager must know them before it starts.
const harnessNamespaces = 4

// startHarness runs the pool and instance controllers in a manager in this
// process, against a real API server, with the real local backend.
func startHarness(t *testing.T) *harness {
	env := testenv.Shared(t)
	dataRoot := t.TempDir()
	lb, err := local.New(local.Options{BinDir: testenv.BinDir(), DataRoot: dataRoot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever a failed test left behind must not outlive it.
		lb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if removed, err := lb.Sweep(ctx, func(string, types.UID) bool { return false }); err != nil || len(removed) > 0 {
			t.Logf("final sweep removed %v (%v)", removed, err)
		}
	})
	namespaces := env.NewNamespaces(t, harnessNamespaces)
	mgr := env.NewManager(t, namespaces.All()...)
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	backends := backend.Registry{kobev1.BackendLocal: lb}
	pools := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName),
		Backends: backends, Clock: clock.RealClock{}, SignalGrace: 5 * time.Second, FreezeSettle: freezeSettle}
	if err := pools.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	instances := &clusterinstance.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder(clusterinstance.ControllerName), Backends: backends, Clock: clock.RealClock{}, Access: accesstest.Sealer(),
		PollInterval: 500 * time.Millisecond}
	if err := instances.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	// The sweep judges ownership from the live members of every namespace,
	// other tests' too: that only adds owners, never makes one of this
	// backend's members (under its own dataRoot) look orphaned.
	if err := mgr.Add(&clusterinstance.SweepRunnable{Backends: backends, Reader: mgr.GetAPIReader(), Cache: mgr.GetCache()}); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	return &harness{env: env, c: env.Client, dataRoot: dataRoot, namespaces: namespaces, local: lb}
}

// namespace hands one subtest a namespace of its own that the harness's
// manager watches.
func (h *harness) namespace(t *testing.T) string { return h.namespaces.Take(t) }

func (h *harness) createPool(t *testing.T, ns, name string, mut func(*kobev1.ClusterPool)) *kobev1.ClusterPool {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](2), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if mut != nil {
		mut(p)
	}
	// Every local member runs: the tests talk to each member's API server
	// (TestWarmMembersFreeze sets its own). Other backends freeze nothing,
	// and warm.running set on them is reported as FieldNotImplemented.
	if p.Spec.Warm == nil && p.Spec.Backend.Type == kobev1.BackendLocal {
		p.Spec.Warm = &kobev1.WarmSpec{Running: ptr.To[int32](100)}
	}
	if err := h.c.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (h *harness) pool(t *testing.T, p *kobev1.ClusterPool) (*kobev1.ClusterPool, bool) {
	got := &kobev1.ClusterPool{}
	err := h.c.Get(t.Context(), client.ObjectKeyFromObject(p), got)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return got, true
}

func (h *harness) members(t *testing.T, p *kobev1.ClusterPool) []kobev1.ClusterInstance {
	var list kobev1.ClusterInstanceList
	if err := h.c.List(t.Context(), &list, client.InNamespace(p.Namespace), client.MatchingLabels{kobev1.LabelPool: p.Name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func summary(ms []kobev1.ClusterInstance) string {
	var s []string
	for _, m := range ms {
		d := ""
		if m.DeletionTimestamp != nil {
			d = ",deleting"
		}
		s = append(s, fmt.Sprintf("%s=%s%s", m.Name, m.Status.Phase, d))
	}
	return strings.Join(s, " ")
}

// waitPool waits until the pool's status satisfies cond.
func (h *harness) waitPool(t *testing.T, p *kobev1.ClusterPool, timeout time.Duration, what string, cond func(*kobev1.ClusterPool) bool) *kobev1.ClusterPool {
	t.Helper()
	var got *kobev1.ClusterPool
	testenv.Eventually(t, timeout, p.Name+": "+what, func() error {
		var ok bool
		got, ok = h.pool(t, p)
		if !ok {
			return errors.New("pool gone")
		}
		if cond(got) {
			return nil
		}
		st := got.Status
		return fmt.Errorf("phase %s ready %d leased %d creating %d recycling %d failures %d; members %s; conditions %v",
			st.Phase, st.Ready, st.Leased, st.Creating, st.Recycling, st.Failures, summary(h.members(t, p)), st.Conditions)
	})
	return got
}

func readyIs(n int32) func(*kobev1.ClusterPool) bool {
	return func(p *kobev1.ClusterPool) bool { return p.Status.Ready == n }
}

func (h *harness) adminKubeconfig(t *testing.T, m *kobev1.ClusterInstance) []byte {
	live := &kobev1.ClusterInstance{}
	if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(m), live); err != nil {
		t.Fatal(err)
	}
	a, err := accesstest.Sealer().Full(live)
	if err != nil {
		t.Fatal(err)
	}
	return a.AdminKubeconfig
}

// memberDir is the member's data directory under the local backend's root.
func (h *harness) memberDir(t *testing.T, m *kobev1.ClusterInstance) string {
	dir, err := memberproc.Dir(h.dataRoot, m.UID)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// apiServerPID reads the member's kube-apiserver pid from the local
// backend's state file.
func (h *harness) apiServerPID(t *testing.T, m *kobev1.ClusterInstance) int {
	pids, err := memberproc.Components(h.memberDir(t, m))
	if err != nil {
		t.Fatal(err)
	}
	pid, ok := pids["kube-apiserver"]
	if !ok {
		t.Fatalf("no kube-apiserver among %v", pids)
	}
	return pid
}

// running lists the live processes whose command line mentions dir.
func running(t *testing.T, dir string) []memberproc.Process {
	ps, err := memberproc.Running(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func (h *harness) events(t *testing.T, ns, name, reason string) []string {
	var list eventsv1.EventList
	if err := h.c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// bind does what the binder does (lease first, then the member).
func (h *harness) bind(t *testing.T, m *kobev1.ClusterInstance, name string) *kobev1.ClusterLease {
	t.Helper()
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace}, Spec: kobev1.ClusterLeaseSpec{Pool: m.Spec.PoolRef.Name}}
	if err := h.c.Create(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	l.Status.Phase = kobev1.LeaseBound
	l.Status.InstanceRef = &kobev1.ObjectRef{Name: m.Name, UID: m.UID}
	if err := h.c.Status().Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	for {
		cur := &kobev1.ClusterInstance{}
		if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(m), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec.LeaseRef = &kobev1.LeaseBinding{Name: l.Name, UID: l.UID}
		cur.Labels[kobev1.LabelLease] = l.Name
		err := h.c.Update(t.Context(), cur)
		if err == nil {
			return l
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
}

func (h *harness) setSize(t *testing.T, p *kobev1.ClusterPool, n int32) {
	got, _ := h.pool(t, p)
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Size = ptr.To(n)
	if err := h.c.Patch(t.Context(), got, patch); err != nil {
		t.Fatal(err)
	}
}

func TestPoolController(t *testing.T) {
	h := startHarness(t)

	t.Run("a pool whose backend is not wired creates nothing and says which backends are", func(t *testing.T) {
		ns := h.namespace(t)
		p := h.createPool(t, ns, "k3s", func(p *kobev1.ClusterPool) { p.Spec.Backend.Type = kobev1.BackendK3s })
		got := h.waitPool(t, p, shortWait, "Capacity=False BackendUnavailable", func(p *kobev1.ClusterPool) bool {
			c := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionCapacity)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kobev1.ReasonBackendUnavailable
		})
		c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionCapacity)
		if !strings.Contains(c.Message, `"k3s"`) || !strings.Contains(c.Message, "wired backends: local") {
			t.Errorf("Capacity message = %q", c.Message)
		}
		if got.Status.Phase != kobev1.PoolDegraded || got.Status.ObservedGeneration != got.Generation {
			t.Errorf("phase %s observedGeneration %d generation %d", got.Status.Phase, got.Status.ObservedGeneration, got.Generation)
		}
		if ms := h.members(t, p); len(ms) != 0 {
			t.Errorf("members created: %s", summary(ms))
		}
		if len(h.events(t, ns, p.Name, kobev1.ReasonBackendUnavailable)) == 0 {
			t.Error("no BackendUnavailable event on the pool")
		}

		// status.failures belongs to the instance controller: the pool's own
		// status patches must never overwrite it.
		before := got.DeepCopy()
		got.Status.Failures = 5
		if err := h.c.Status().Patch(t.Context(), got, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		h.setSize(t, p, 4)
		got = h.waitPool(t, p, shortWait, "observedGeneration 2", func(p *kobev1.ClusterPool) bool { return p.Status.ObservedGeneration == 2 })
		if got.Status.Failures != 5 {
			t.Errorf("failures = %d after the pool patched its status, want 5", got.Status.Failures)
		}
		if err := h.c.Delete(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, shortWait, "pool gone", func() error {
			if _, ok := h.pool(t, p); ok {
				return errors.New("pool still there")
			}
			return nil
		})
	})

	t.Run("a readiness gate nothing sets is reported as ReadinessSignalAbsent", func(t *testing.T) {
		ns := h.namespace(t)
		p := h.createPool(t, ns, "signal", func(p *kobev1.ClusterPool) {
			p.Spec.Size = ptr.To[int32](1)
			p.Spec.ReadinessGates = []kobev1.ReadinessGate{{Type: "ExternalSignal"}}
			p.Spec.Snapshot = &kobev1.SnapshotSpec{Velero: kobev1.VeleroSnapshot{BackupName: "golden"}}
		})
		got := h.waitPool(t, p, memberReady, "Warm=False ReadinessSignalAbsent", func(p *kobev1.ClusterPool) bool {
			c := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionWarm)
			return c != nil && c.Reason == kobev1.ReasonReadinessSignalAbsent
		})
		c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionWarm)
		t.Logf("Warm: %s", c.Message)
		if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, `"ExternalSignal"`) {
			t.Errorf("Warm = %+v", c)
		}
		if got.Status.Phase != kobev1.PoolDegraded {
			t.Errorf("phase = %s", got.Status.Phase)
		}
		ni := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionNotImplemented)
		if ni == nil || ni.Status != metav1.ConditionTrue || !strings.Contains(ni.Message, "snapshot") {
			t.Errorf("FieldNotImplemented = %+v", ni)
		}
		ms := h.members(t, p)
		if len(ms) != 1 {
			t.Fatalf("members: %s", summary(ms))
		}
		// The built-in gates passed; only the external one is missing.
		for _, g := range []string{"APIServerReachable", "InClusterToken"} {
			if !meta.IsStatusConditionTrue(ms[0].Status.Conditions, g) {
				t.Errorf("gate %s not passed: %v", g, ms[0].Status.Conditions)
			}
		}

		// Once something publishes the signal, the member is Ready and the pool warm.
		m := ms[0].DeepCopy()
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: "ExternalSignal", Status: metav1.ConditionTrue, Reason: "Published", Message: "by the test"})
		if err := h.c.Status().Patch(t.Context(), m, client.MergeFromWithOptions(&ms[0], client.MergeFromWithOptimisticLock{})); err != nil {
			t.Fatal(err)
		}
		got = h.waitPool(t, p, shortWait, "Warm", func(p *kobev1.ClusterPool) bool {
			return meta.IsStatusConditionTrue(p.Status.Conditions, kobev1.ConditionWarm)
		})
		if got.Status.Phase != kobev1.PoolHealthy || got.Status.Ready != 1 {
			t.Errorf("phase %s ready %d", got.Status.Phase, got.Status.Ready)
		}
		h.deletePoolAndWait(t, p)
	})

	t.Run("a local pool fills, serves kubectl, replaces a killed member, scales and cleans up", func(t *testing.T) {
		ns := h.namespace(t)
		p := h.createPool(t, ns, "ci", func(p *kobev1.ClusterPool) {
			p.Spec.HealthCheck = &kobev1.HealthCheckSpec{IntervalSeconds: 2, FailureThreshold: 2}
		})

		start := time.Now()
		got := h.waitPool(t, p, memberReady, "ready 2", readyIs(2))
		t.Logf("pool of 2 Ready after %s", time.Since(start).Round(time.Second))
		if got.Status.Phase != kobev1.PoolHealthy || !meta.IsStatusConditionTrue(got.Status.Conditions, kobev1.ConditionWarm) ||
			!meta.IsStatusConditionTrue(got.Status.Conditions, kobev1.ConditionCapacity) || got.Status.NextOrdinal != 2+ordinalBlock {
			t.Errorf("status = %+v", got.Status)
		}
		ms := h.members(t, p)
		for i := range ms {
			m := &ms[i]
			ref := metav1.GetControllerOf(m)
			if ref == nil || ref.UID != got.UID || m.Spec.TemplateHash != got.Status.TemplateHash {
				t.Errorf("%s: controller %v, template %s", m.Name, ref, m.Spec.TemplateHash)
			}
		}
		if len(ms) != 2 {
			t.Errorf("%d members, want 2: %s", len(ms), summary(ms))
		}

		t.Log("kubectl with each member's admin kubeconfig: a namespace and a Deployment that gets its ReplicaSet")
		for i := range ms {
			kc := testenv.KubeconfigFile(t, h.adminKubeconfig(t, &ms[i]))
			for _, args := range [][]string{
				{"create", "namespace", "demo"},
				{"-n", "demo", "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10"},
			} {
				if out, err := testenv.Kubectl(t, kc, args...); err != nil {
					t.Fatalf("%s: kubectl %v: %v\n%s", ms[i].Name, args, err, out)
				}
			}
			testenv.Eventually(t, time.Minute, ms[i].Name+": ReplicaSet of web", func() error {
				out, err := testenv.Kubectl(t, kc, "-n", "demo", "get", "replicasets", "-l", "app=web", "-o", "name")
				if err != nil {
					return fmt.Errorf("kubectl: %w: %s", err, out)
				}
				if !strings.HasPrefix(out, "replicaset.apps/web-") {
					return fmt.Errorf("no ReplicaSet of web yet: %q", out)
				}
				return nil
			})
		}

		t.Log("kill -9 of one member's kube-apiserver")
		victim := ms[0]
		pid := h.apiServerPID(t, &victim)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		limit := 2*2*time.Second + 10*time.Second // interval x threshold + margin
		testenv.Eventually(t, limit, victim.Name+" recycled", func() error {
			cur := &kobev1.ClusterInstance{}
			err := h.c.Get(t.Context(), client.ObjectKeyFromObject(&victim), cur)
			if apierrors.IsNotFound(err) || cur.Status.Phase == kobev1.InstanceRecycling || cur.DeletionTimestamp != nil {
				return nil
			}
			return fmt.Errorf("phase %s failures %d", cur.Status.Phase, cur.Status.HealthFailures)
		})
		t.Logf("%s recycled %s after kill -9", victim.Name, time.Since(killed).Round(100*time.Millisecond))
		testenv.Eventually(t, shortWait, victim.Name+" destroyed", func() error {
			err := h.c.Get(t.Context(), client.ObjectKeyFromObject(&victim), &kobev1.ClusterInstance{})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return err
			}
			return errors.New("still there")
		})
		if len(h.events(t, ns, victim.Name, kobev1.ReasonUnhealthy)) == 0 {
			t.Errorf("no Unhealthy event on %s", victim.Name)
		}
		got = h.waitPool(t, p, memberReady, "ready 2 again", readyIs(2))
		t.Logf("replacement Ready %s after kill -9", time.Since(killed).Round(time.Second))
		// The replacement (ordinal 2) came out of the block reserved with
		// the first two: no new reservation, no status write for it.
		if got.Status.NextOrdinal != 2+ordinalBlock {
			t.Errorf("nextOrdinal = %d, want %d (the first block's end)", got.Status.NextOrdinal, 2+ordinalBlock)
		}

		t.Log("a bound member leaves Ready: the pool replaces it")
		ms = h.members(t, p)
		held := ms[0]
		lease := h.bind(t, &held, "held")
		h.waitPool(t, p, memberReady, "ready 2, leased 1", func(p *kobev1.ClusterPool) bool {
			return p.Status.Ready == 2 && p.Status.Leased == 1 && p.Status.Creating == 0
		})

		t.Log("size 2 -> 3")
		h.setSize(t, p, 3)
		h.waitPool(t, p, memberReady, "ready 3, leased 1", func(p *kobev1.ClusterPool) bool {
			return p.Status.Ready == 3 && p.Status.Leased == 1 && p.Status.Creating == 0
		})
		readyBefore := map[string]string{}
		for _, m := range h.members(t, p) {
			if m.Status.Phase == kobev1.InstanceReady {
				readyBefore[m.Name] = h.memberDir(t, &m)
			}
		}

		t.Log("size 3 -> 1: only Ready members go")
		h.setSize(t, p, 1)
		h.waitPool(t, p, shortWait, "ready 1, leased 1, nothing else", func(p *kobev1.ClusterPool) bool {
			return p.Status.Ready == 1 && p.Status.Leased == 1 && p.Status.Creating == 0 && p.Status.Recycling == 0 &&
				len(h.members(t, p)) == 2
		})
		// The two that went were among the three Ready ones; the leased
		// one stays (below).
		for _, m := range h.members(t, p) {
			if _, wasReady := readyBefore[m.Name]; !wasReady && m.Name != held.Name {
				t.Errorf("member %s (%s) appeared while the pool shrank", m.Name, m.Status.Phase)
			}
		}
		cur := &kobev1.ClusterInstance{}
		if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(&held), cur); err != nil || cur.Status.Phase != kobev1.InstanceLeased {
			t.Errorf("the leased member: %v %s", err, cur.Status.Phase)
		}
		for name, dir := range readyBefore {
			if slices.ContainsFunc(h.members(t, p), func(m kobev1.ClusterInstance) bool { return m.Name == name }) {
				continue
			}
			if procs := running(t, dir); len(procs) > 0 {
				t.Errorf("scaled-down member %s still runs: %v", name, procs)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("scaled-down member %s still has its data directory: %v", name, err)
			}
		}

		t.Log("deleting the pool removes its unbound members and leaves the leased one to its lease")
		if err := h.c.Delete(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, shortWait, "pool gone", func() error {
			if _, ok := h.pool(t, p); ok {
				return errors.New("pool still there; members " + summary(h.members(t, p)))
			}
			return nil
		})
		rest := h.members(t, p)
		if len(rest) != 1 || rest[0].Name != held.Name || rest[0].Status.Phase != kobev1.InstanceLeased {
			t.Fatalf("after pool deletion: %s", summary(rest))
		}
		lease.Status.Phase = kobev1.LeaseReleased
		if err := h.c.Status().Update(t.Context(), lease); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, shortWait, "released member destroyed", func() error {
			if ms := h.members(t, p); len(ms) > 0 {
				return errors.New("members " + summary(ms))
			}
			return nil
		})
		h.expectNothingLeft(t)
	})
}

// deletePoolAndWait deletes a pool and waits until it and its members are gone.
func (h *harness) deletePoolAndWait(t *testing.T, p *kobev1.ClusterPool) {
	t.Helper()
	if err := h.c.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, shortWait, "pool and members gone", func() error {
		_, ok := h.pool(t, p)
		if ms := h.members(t, p); ok || len(ms) > 0 {
			return fmt.Errorf("pool there %v, members %s", ok, summary(ms))
		}
		return nil
	})
	h.expectNothingLeft(t)
}

// expectNothingLeft checks /proc and the data root: no member process runs
// and no member directory is left.
func (h *harness) expectNothingLeft(t *testing.T) {
	t.Helper()
	if procs := running(t, h.dataRoot); len(procs) > 0 {
		t.Errorf("member processes still running: %v", procs)
	}
	entries, err := os.ReadDir(h.dataRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the data root: %s", e.Name())
	}
}
