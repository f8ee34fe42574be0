//go:build integration

package clusterinstance

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/sim"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestSimulatedMembers runs the instance controller with the real sim
// backend, whose endpoint answers nothing: built-in gates pass unprobed, a
// gate that is someone else's condition still holds a member, a Ready
// member is not probed (so it stays Ready), and the access Secret written
// once is kept across an operator restart.
func TestSimulatedMembers(t *testing.T) {
	env := testenv.Shared(t)
	ns := env.NewNamespace(t)
	start := func(t *testing.T) func() {
		mgr := env.NewManager(t, ns)
		if err := index.Setup(t.Context(), mgr); err != nil {
			t.Fatal(err)
		}
		r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName), Access: accesstest.Sealer(),
			Clock: clock.RealClock{}, Backends: backend.Registry{kobev1.BackendSim: sim.New(sim.Options{})},
			PollInterval: 100 * time.Millisecond}
		if err := r.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		stop, err := testenv.RunManager(mgr)
		if err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := stop(); err != nil {
				t.Errorf("stopping manager: %v", err)
			}
		}
	}
	stop := start(t)
	h := &harness{env: env, c: env.Client}
	const seeded = "Seeded"
	p, m := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) {
		p.Spec.Backend = kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: 2 * time.Second}}}
		p.Spec.ReadinessGates = []kobev1.ReadinessGate{{Type: kobev1.GateNodesReady}, {Type: seeded}}
		p.Spec.HealthCheck = &kobev1.HealthCheckSpec{IntervalSeconds: 1, FailureThreshold: 1}
	})
	m2 := h.member(t, p, 1)

	// Provisioned after readyAfter, built-in gates passed, held by the
	// external gate.
	testenv.Eventually(t, 15*time.Second, "member provisioned and waiting for "+seeded, func() error {
		got, ok := h.get(t, m)
		if !ok {
			return holds(false, "gone")
		}
		c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionReady)
		return holds(meta.IsStatusConditionTrue(got.Status.Conditions, kobev1.ConditionProvisioned) && c != nil &&
			c.Status == metav1.ConditionFalse && c.Message == "waiting for readiness gates: "+seeded,
			fmt.Sprintf("phase %q conditions %v", got.Status.Phase, got.Status.Conditions))
	})
	got, _ := h.get(t, m)
	prov := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionProvisioned)
	if d := prov.LastTransitionTime.Sub(got.CreationTimestamp.Time); d < 2*time.Second {
		// Both times are truncated to the second, readyAt is
		// creationTimestamp + readyAfter: d is never under readyAfter.
		t.Errorf("provisioned %s after creation, want about readyAfter (2s)", d)
	}
	for _, g := range kobev1.GateKeys(kobev1.EffectiveGates(kobev1.GatesOfTypes(kobev1.GateNodesReady))) {
		if !meta.IsStatusConditionTrue(got.Status.Conditions, g) {
			t.Errorf("built-in gate %s not passed: %v", g, got.Status.Conditions)
		}
	}
	if got.Status.Phase != kobev1.InstanceCreating || got.Status.Endpoint != sim.Endpoint {
		t.Errorf("phase %s endpoint %q, want Creating at %s", got.Status.Phase, got.Status.Endpoint, sim.Endpoint)
	}

	// The external gate passes: Ready, and it stays Ready although its
	// endpoint answers nothing and the health interval is 1s with a
	// threshold of 1.
	for _, mm := range []*kobev1.ClusterInstance{m, m2} {
		testenv.Eventually(t, 10*time.Second, "setting "+seeded+" on "+mm.Name, func() error {
			cur, ok := h.get(t, mm)
			if !ok {
				return holds(false, "gone")
			}
			meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: seeded, Status: metav1.ConditionTrue, Reason: "Seeded", Message: "seeded"})
			return h.c.Status().Update(t.Context(), cur)
		})
		h.waitPhase(t, mm, kobev1.InstanceReady, 10*time.Second)
	}
	access := func() *kobev1.ClusterInstance {
		cur, ok := h.get(t, m)
		if !ok || cur.Status.Access == nil {
			t.Fatalf("member %s has no status.access: %+v", m.Name, cur)
		}
		return cur
	}
	before := access()
	if a, err := accesstest.Sealer().Full(before); err != nil || a.Endpoint != sim.Endpoint {
		t.Fatalf("status.access: %v, endpoint %v", err, a)
	}

	// A restart (a new operator process, a new sim backend) leaves the
	// Ready member and its key material as they were.
	stop()
	stop = start(t)
	defer stop()
	testenv.Consistently(t, 3*time.Second, "the member to stay Ready after the restart", func() error {
		cur, ok := h.get(t, m)
		return holds(ok && cur.Status.Phase == kobev1.InstanceReady, fmt.Sprintf("after restart: member %v", cur))
	})
	after := access()
	if !equality.Semantic.DeepEqual(after.Status.Access, before.Status.Access) {
		t.Errorf("status.access rewritten after the restart")
	}

	// Delete: the backend reports gone at once, the material goes with the
	// member.
	if err := h.c.Delete(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, m, 10*time.Second)
}
