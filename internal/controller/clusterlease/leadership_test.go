//go:build integration

package clusterlease_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// switchedLeadership is a leadership.Checker the test turns on and off.
type switchedLeadership struct{ certain atomic.Bool }

func (s *switchedLeadership) Certain() bool { return s.certain.Load() }

// TestUncertainLeaderBindsNothing (make soak found it): a leader resumed
// after a pause longer than its lease, while another replica already leads,
// must not bind a queued lease: both would, to two members. Until it is sure
// of its leadership again the controller leaves the lease queued and its
// member unclaimed; then it binds.
func TestUncertainLeaderBindsNothing(t *testing.T) {
	env := shared.env
	ns := env.NewNamespace(t)
	mgr, err := ctrl.NewManager(env.Config, env.ManagerOptions(ns))
	if err != nil {
		t.Fatal(err)
	}
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	leader := &switchedLeadership{}
	clk := clock.RealClock{}
	r := &clusterlease.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Binder:   &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk},
		Recorder: mgr.GetEventRecorder("test"), Clock: clk, Retention: time.Hour, Leadership: leader,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)

	h := &harness{t: t, c: env.Client, ns: ns}
	h.pool("paused", 0)
	inst := h.member("paused")
	h.lease("waits", "paused", time.Hour)
	// Longer than the lease's in-flight grace and a few rechecks.
	time.Sleep(3 * time.Second)
	if l := h.get("waits"); l.Status.Phase == kobev1.LeaseBound || l.Status.InstanceRef != nil {
		t.Fatalf("an uncertain leader bound the lease: status %+v", l.Status)
	}
	var m kobev1.ClusterInstance
	h.must(h.c.Get(t.Context(), client.ObjectKeyFromObject(inst), &m))
	if m.Spec.LeaseRef != nil {
		t.Fatalf("an uncertain leader claimed member %s for lease %s", m.Name, m.Spec.LeaseRef.Name)
	}

	leader.certain.Store(true)
	h.eventually(10*time.Second, "the lease bound once the leadership is certain", func() error {
		if l := h.get("waits"); l.Status.Phase != kobev1.LeaseBound || l.Status.InstanceRef == nil || l.Status.InstanceRef.Name != inst.Name {
			return fmt.Errorf("lease status %+v", l.Status)
		}
		return nil
	})
}
