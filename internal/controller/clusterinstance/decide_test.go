package clusterinstance

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func TestSettingsFor(t *testing.T) {
	inst := &kobev1.ClusterInstance{}
	s := settingsFor(nil, inst)
	if s.creatingTimeout != 10*time.Minute || s.interval != 30*time.Second || s.threshold != 3 || len(s.gates) != 2 || s.nodes != 0 {
		t.Errorf("defaults = %+v", s)
	}
	withNodes := &kobev1.ClusterInstance{Spec: kobev1.ClusterInstanceSpec{Backend: kobev1.BackendSpec{
		Type: kobev1.BackendLocal, Local: &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](2)}}}}
	if s := settingsFor(nil, withNodes); s.nodes != 2 || strings.Join(kobev1.GateKeys(s.gates), ",") != "APIServerReachable,InClusterToken,NodesReady,DNSHealthy" {
		t.Errorf("a member with nodes whose pool is gone = %+v", s)
	}
	p := &kobev1.ClusterPool{Spec: kobev1.ClusterPoolSpec{
		CreatingTimeout: &metav1.Duration{Duration: time.Minute},
		HealthCheck:     &kobev1.HealthCheckSpec{IntervalSeconds: 2, FailureThreshold: 5},
		ReadinessGates:  []kobev1.ReadinessGate{{Type: "NodesReady"}},
	}}
	s = settingsFor(p, inst)
	if s.creatingTimeout != time.Minute || s.interval != 2*time.Second || s.threshold != 5 || len(s.gates) != 3 || s.gates[2].Key() != "NodesReady" {
		t.Errorf("from pool = %+v", s)
	}
	// The member's own backend spec decides, not the pool's current one.
	p.Spec.ReadinessGates = []kobev1.ReadinessGate{{Type: "X"}}
	if s := settingsFor(p, withNodes); strings.Join(kobev1.GateKeys(s.gates), ",") != "APIServerReachable,InClusterToken,X,NodesReady,DNSHealthy" {
		t.Errorf("gates of a member with nodes = %v", s.gates)
	}
}

func TestCreatingLeft(t *testing.T) {
	inst := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}}
	if got := creatingLeft(inst, time.Minute, t0.Add(20*time.Second)); got != 40*time.Second {
		t.Errorf("from creation: %s", got)
	}
	inst.Status.Phase = kobev1.InstanceCreating
	inst.Status.LastPhaseChange = ptr.To(metav1.NewTime(t0.Add(10 * time.Second)))
	if got := creatingLeft(inst, time.Minute, t0.Add(80*time.Second)); got != -10*time.Second {
		t.Errorf("from phase change: %s", got)
	}
}

func TestHealth(t *testing.T) {
	inst := &kobev1.ClusterInstance{}
	if healthDue(inst, time.Second, t0) != 0 {
		t.Error("never probed must be due")
	}
	inst.Status.LastHealthCheck = ptr.To(metav1.NewTime(t0))
	if got := healthDue(inst, 2*time.Second, t0.Add(500*time.Millisecond)); got != 1500*time.Millisecond {
		t.Errorf("due = %s", got)
	}
	boom := errors.New("boom")
	cases := []struct {
		failures  int32
		err       error
		threshold int32
		want      int32
		recycle   bool
	}{
		{0, nil, 3, 0, false},
		{2, nil, 3, 0, false}, // a success resets the counter
		{0, boom, 3, 1, false},
		{1, boom, 2, 2, true},
		{0, boom, 1, 1, true},
	}
	for _, c := range cases {
		got, rec := healthVerdict(c.failures, c.err, c.threshold)
		if got != c.want || rec != c.recycle {
			t.Errorf("healthVerdict(%d, %v, %d) = %d, %v; want %d, %v", c.failures, c.err, c.threshold, got, rec, c.want, c.recycle)
		}
	}
}

func TestJudgeLease(t *testing.T) {
	inst := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "m-uid"},
		Spec: kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: "l", UID: "l-uid"}}}
	lease := func(mut func(*kobev1.ClusterLease)) *kobev1.ClusterLease {
		l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "l", UID: "l-uid"},
			Status: kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: "m", UID: "m-uid"}}}
		if mut != nil {
			mut(l)
		}
		return l
	}
	now := metav1.NewTime(t0)
	cases := []struct {
		name string
		l    *kobev1.ClusterLease
		want leaseState
		// forGood: ended as no live read can contradict (endedForGood),
		// so the cache's word is enough.
		forGood bool
	}{
		{"bound to us", lease(nil), leaseActive, false},
		{"gone", nil, leaseEnded, false},
		{"re-created", lease(func(l *kobev1.ClusterLease) { l.UID = "other" }), leaseEnded, false},
		{"deleting", lease(func(l *kobev1.ClusterLease) { l.DeletionTimestamp = &now }), leaseEnded, true},
		{"holds another member", lease(func(l *kobev1.ClusterLease) { l.Status.InstanceRef.Name = "x" }), leaseEnded, false},
		{"holds a re-created member of our name", lease(func(l *kobev1.ClusterLease) { l.Status.InstanceRef.UID = "old" }), leaseEnded, false},
		{"released", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeaseReleased }), leaseEnded, true},
		{"expired", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeaseExpired }), leaseEnded, true},
		{"recycling", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeaseRecycling }), leaseEnded, true},
		{"quarantined", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeaseQuarantined }), leaseEnded, true},
		// The member's leaseRef is the bind; the lease's status copy follows.
		{"status copy not written yet", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = ""; l.Status.InstanceRef = nil }), leaseActive, false},
		{"pending, copy not written yet", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeasePending; l.Status.InstanceRef = nil }), leaseActive, false},
		{"status copy names another member (two claimed)", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = ""; l.Status.InstanceRef.Name = "other" }), leaseEnded, false},
		{"ended before its copy was written", lease(func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeaseReleased; l.Status.InstanceRef = nil }), leaseEnded, true},
	}
	for _, c := range cases {
		if got, msg := judgeLease(inst, c.l); got != c.want {
			t.Errorf("%s: got %v (%s), want %v", c.name, got, msg, c.want)
		}
		if got := endedForGood(inst, c.l); got != c.forGood {
			t.Errorf("%s: ended for good %v, want %v", c.name, got, c.forGood)
		}
	}
	// A bind recorded without the lease's UID (an older operator's) cannot
	// tell the lease from one re-created under its name: confirmed live.
	noUID := inst.DeepCopy()
	noUID.Spec.LeaseRef.UID = ""
	if endedForGood(noUID, lease(func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeaseReleased })) {
		t.Error("a released lease of a bind without its UID: ended for good, want a live read")
	}
}

func TestTimeoutVerdict(t *testing.T) {
	refused := func(reason string) *kobev1.ClusterInstance {
		return &kobev1.ClusterInstance{Status: kobev1.ClusterInstanceStatus{Conditions: []metav1.Condition{{
			Type: kobev1.ConditionProvisioned, Status: metav1.ConditionFalse, Reason: reason, Message: "bad spec"}}}}
	}
	for _, tc := range []struct {
		name string
		inst *kobev1.ClusterInstance
		want string
	}{
		{"still building", &kobev1.ClusterInstance{}, kobev1.ReasonCreatingTimeout},
		{"building, condition Creating", refused(kobev1.ReasonCreating), kobev1.ReasonCreatingTimeout},
		{"refused by the backend", refused(kobev1.ReasonProvisionFailed), kobev1.ReasonProvisionFailed},
		{"backend unavailable", refused(kobev1.ReasonBackendUnavailable), kobev1.ReasonBackendUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg := timeoutVerdict(tc.inst, time.Minute)
			if reason != tc.want || !strings.Contains(msg, "creatingTimeout 1m0s") {
				t.Fatalf("timeoutVerdict = %q, %q; want reason %q", reason, msg, tc.want)
			}
		})
	}
}

func TestLeasedWriteWait(t *testing.T) {
	bound := func(at *metav1.Time, phase kobev1.InstancePhase) *kobev1.ClusterInstance {
		return &kobev1.ClusterInstance{
			Spec:   kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: "l", UID: "l-uid", BoundAt: at}},
			Status: kobev1.ClusterInstanceStatus{Phase: phase},
		}
	}
	at := metav1.NewTime(t0)
	for _, tc := range []struct {
		name string
		inst *kobev1.ClusterInstance
		now  time.Time
		want time.Duration
	}{
		// boundAt is to the second: the bind came within the second after it.
		{"just bound", bound(&at, kobev1.InstanceReady), t0, time.Second + leasedPhaseDelay},
		{"bound 300ms ago at most", bound(&at, kobev1.InstanceReady), t0.Add(300 * time.Millisecond), time.Second + leasedPhaseDelay - 300*time.Millisecond},
		{"bound long enough, whenever in its second", bound(&at, kobev1.InstanceReady), t0.Add(time.Second + leasedPhaseDelay), 0},
		{"bound an hour ago (an operator that was down)", bound(&at, kobev1.InstanceReady), t0.Add(time.Hour), 0},
		{"Leased already", bound(&at, kobev1.InstanceLeased), t0, 0},
		{"a bind that does not say when", bound(nil, kobev1.InstanceReady), t0, 0},
		{"a clock behind the binder's", bound(&at, kobev1.InstanceReady), t0.Add(-time.Minute), time.Second + leasedPhaseDelay},
	} {
		if got := leasedWriteWait(tc.inst, tc.now); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
