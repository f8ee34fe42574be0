//go:build integration

package clusterinstance

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

func TestLeasedMemberLost(t *testing.T) {
	cases := []struct {
		state backend.State
		lost  bool
	}{
		{backend.StateFailed, true},
		{backend.StateAbsent, true},
		{backend.StateReady, false},
		{backend.StateProvisioning, false},
	}
	for _, tc := range cases {
		lost, why := leasedMemberLost(backend.Observation{State: tc.state, Message: "kube-apiserver (pid 42) is not running"})
		if lost != tc.lost || lost == (why == "") {
			t.Errorf("%s: lost=%v why=%q, want lost=%v with a reason", tc.state, lost, why, tc.lost)
		}
	}
}

// forget makes the fake report the member Absent, as a backend whose
// member vanished (its data directory removed behind the operator's back).
func (f *fakeBackend) forget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.state, name)
}

// TestLeasedMemberDeathIsObserved (InstanceLost): a leased member
// whose backend reports it Failed or gone is recycled with reason
// InstanceLost, within about a health interval; one the backend reports
// well stays Leased, however its holder's use makes /readyz answer.
func TestLeasedMemberDeathIsObserved(t *testing.T) {
	h := startHarness(t)
	ns := h.namespace(t)
	p, failed := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) {
		p.Spec.HealthCheck = &kobev1.HealthCheckSpec{IntervalSeconds: 1, FailureThreshold: 2}
	})
	vanished := h.member(t, p, 1)
	well := h.member(t, p, 2)
	for i, m := range []*kobev1.ClusterInstance{failed, vanished, well} {
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		h.bind(t, m, fmt.Sprintf("l%d", i))
		h.waitPhase(t, m, kobev1.InstanceLeased, 10*time.Second)
	}

	start := time.Now()
	h.fake.setState(ns+"/"+failed.Name, backend.StateFailed)
	h.fake.forget(ns + "/" + vanished.Name)
	for _, m := range []*kobev1.ClusterInstance{failed, vanished} {
		testenv.Eventually(t, 15*time.Second, m.Name+" recycled as InstanceLost", func() error {
			got, ok := h.get(t, m)
			if !ok {
				return nil // destroyed already: the Event below tells why
			}
			c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionReady)
			return holds(got.Status.Phase == kobev1.InstanceRecycling && c != nil && c.Reason == kobev1.ReasonInstanceLost,
				fmt.Sprintf("phase %s Ready %+v", got.Status.Phase, c))
		})
		h.waitEvent(t, ns, m.Name, kobev1.ReasonInstanceLost)
		h.waitGone(t, m, 15*time.Second)
	}
	t.Logf("both lost members recycled %s after they died", time.Since(start).Round(100*time.Millisecond))
	if got, _ := h.get(t, well); got == nil || got.Status.Phase != kobev1.InstanceLeased {
		t.Errorf("the well member is %v, want Leased", got)
	}
	if f := h.failures(t, p); f != 0 {
		t.Errorf("pool failures = %d; a member lost while leased is not a failure to become Ready", f)
	}
}
