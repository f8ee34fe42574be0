//go:build heavy

package clusterpool

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/sim"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterinstance"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestRolloutAndScaleDown runs the pool and instance controllers with the
// sim backend against a real API server. A changed template replaces the
// Ready member surge-style: the new member is built first and the old one
// retired only once the new one is Ready, so a Ready member is there at
// every moment. A queued lease then grows the pool, and once it is gone the
// surplus member stays until scaleDownAfter after the last pressure.
func TestRolloutAndScaleDown(t *testing.T) {
	h, ns := startSimControllers(t)
	ctx, c := t.Context(), h.c

	const quiet = 15 * time.Second
	readyAfter := func(d time.Duration) *kobev1.SimBackendSpec {
		return &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: d}}
	}
	p := h.createPool(t, ns, "roll", func(p *kobev1.ClusterPool) {
		p.Spec.Backend = kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: readyAfter(2 * time.Second)}
		p.Spec.Scaling = &kobev1.ScalingSpec{MinReady: ptr.To[int32](1), MaxClusters: ptr.To[int32](3),
			ScaleDownAfter: &metav1.Duration{Duration: quiet}}
	})
	got := h.waitPool(t, p, shortWait, "ready 1", readyIs(1))
	if got.Status.TemplateRevision != 1 || got.Status.Outdated != 0 || got.Status.LastPressure != nil {
		t.Errorf("templateRevision %d outdated %d lastPressure %v, want 1, 0, none", got.Status.TemplateRevision, got.Status.Outdated, got.Status.LastPressure)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionProvisioning); c == nil || c.Reason != kobev1.ReasonMembersSucceeding {
		t.Errorf("Provisioning = %+v, want MembersSucceeding", c)
	}
	if ni := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionNotImplemented); ni == nil || ni.Status != metav1.ConditionFalse {
		t.Errorf("FieldNotImplemented = %+v: scaleDownAfter is acted on", ni)
	}
	old := h.members(t, p)
	if len(old) != 1 {
		t.Fatalf("members: %s", summary(old))
	}

	t.Log("template change: the new member comes first, the old one goes once it is Ready")
	cur, _ := h.pool(t, p)
	base := cur.DeepCopy()
	cur.Spec.Backend.Sim = readyAfter(3 * time.Second)
	if err := c.Patch(ctx, cur, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	sawOutdated := false
	watchMembers(t, h, p, shortWait, "the old member replaced", func(_ time.Time, ms []kobev1.ClusterInstance, st kobev1.ClusterPoolStatus) (bool, error) {
		ready, building := 0, 0
		for _, m := range ms {
			switch {
			case m.DeletionTimestamp != nil:
			case m.Status.Phase == kobev1.InstanceReady:
				ready++
			default:
				building++
			}
		}
		if ready < 1 {
			return false, fmt.Errorf("no Ready member: the rollout dropped below the warm target: %s", summary(ms))
		}
		if ready+building > 2 {
			return false, fmt.Errorf("%d members Ready or building, more than target 1 + maxSurge 1: %s", ready+building, summary(ms))
		}
		sawOutdated = sawOutdated || st.Outdated == 1
		gone := !containsMember(ms, old[0].Name)
		return gone && ready == 1 && st.Outdated == 0 && st.Ready == 1 && st.TemplateRevision == 2, nil
	})
	if !sawOutdated {
		t.Error("status.outdated never showed the old member")
	}
	got, _ = h.pool(t, p)
	for _, m := range h.members(t, p) {
		if m.Spec.TemplateHash != got.Status.TemplateHash {
			t.Errorf("%s built from %s, the pool builds %s", m.Name, m.Spec.TemplateHash, got.Status.TemplateHash)
		}
	}

	t.Log("a queued lease grows the pool; the surplus stays scaleDownAfter after the lease is gone")
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "burst", Namespace: ns}, Spec: kobev1.ClusterLeaseSpec{Pool: p.Name}}
	if err := c.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	h.waitPool(t, p, shortWait, "ready 2 under pressure", func(p *kobev1.ClusterPool) bool {
		return p.Status.Ready == 2 && p.Status.QueueDepth == 1 && p.Status.LastPressure != nil
	})
	if err := c.Delete(ctx, l); err != nil {
		t.Fatal(err)
	}
	got = h.waitPool(t, p, shortWait, "the lease gone from the queue", func(p *kobev1.ClusterPool) bool { return p.Status.QueueDepth == 0 })
	last := got.Status.LastPressure.Time
	t.Logf("last pressure %s; scale-down allowed from %s", last.Format(time.RFC3339), last.Add(quiet).Format(time.RFC3339))
	// The sim backend destroys at once, and the members are listed every
	// 100 ms: a member gone before scaleDownAfter shows as one.
	watchMembers(t, h, p, quiet+shortWait, "the surplus member scaled down", func(at time.Time, ms []kobev1.ClusterInstance, _ kobev1.ClusterPoolStatus) (bool, error) {
		live := 0
		for _, m := range ms {
			if m.DeletionTimestamp == nil {
				live++
			}
		}
		if live < 2 && at.Before(last.Add(quiet)) {
			return false, fmt.Errorf("at %s, before scaleDownAfter %s after the last pressure, a member is gone: %s", at.Format(time.RFC3339Nano), quiet, summary(ms))
		}
		return live == 1, nil
	})
	h.waitPool(t, p, shortWait, "ready 1 again", func(p *kobev1.ClusterPool) bool {
		return p.Status.Ready == 1 && len(h.members(t, p)) == 1
	})
}

// startSimControllers runs the pool and instance controllers with the sim
// backend against a real API server, for a namespace of the test's own.
func startSimControllers(t *testing.T) (*harness, string) {
	env := testenv.Shared(t)
	ns := env.NewNamespace(t)
	mgr := env.NewManager(t, ns)
	addSimControllers(t, mgr)
	testenv.StartManager(t, mgr)
	return &harness{env: env, c: env.Client}, ns
}

// addSimControllers adds the pool and instance controllers, with the sim
// backend wired, to mgr.
func addSimControllers(t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	backends := backend.Registry{kobev1.BackendSim: sim.New(sim.Options{})}
	pools := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName),
		Backends: backends, Clock: clock.RealClock{}}
	if err := pools.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	instances := &clusterinstance.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder(clusterinstance.ControllerName), Backends: backends, Clock: clock.RealClock{}, Access: accesstest.Sealer(),
		PollInterval: 200 * time.Millisecond}
	if err := instances.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
}

// watchMembers samples the pool's members and status until done reports
// true, failing at once when it returns an error: an invariant that must
// hold at every moment of a transition, not only at its end. done also gets
// the time the sample was taken at (before it was read).
func watchMembers(t *testing.T, h *harness, p *kobev1.ClusterPool, within time.Duration, what string,
	done func(time.Time, []kobev1.ClusterInstance, kobev1.ClusterPoolStatus) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		at := time.Now()
		cur, ok := h.pool(t, p)
		if !ok {
			t.Fatalf("%s: pool gone", what)
		}
		ms := h.members(t, p)
		ok, err := done(at, ms, cur.Status)
		switch {
		case err != nil:
			t.Fatalf("%s: %v", what, err)
		case ok:
			return
		case time.Now().After(deadline):
			t.Fatalf("%s: not after %s; members %s; status %+v", what, within, summary(ms), cur.Status)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(errors.New("test context done"))
		case <-tick.C:
		}
	}
}

func containsMember(ms []kobev1.ClusterInstance, name string) bool {
	for _, m := range ms {
		if m.Name == name {
			return true
		}
	}
	return false
}
