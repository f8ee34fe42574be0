package clusterpool

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/controller/conditions"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// TestSetStatus runs setStatus on plans from pool.Decide, reconcile after
// reconcile on one pool: the template revision, outdated count and last
// pressure it records, the Warning events of Provisioning and DemandCovered
// going False, and DemandCovered removed once the pool stops scaling.
func TestSetStatus(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 700_000_000, time.UTC)
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Generation: 1},
		Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendSim},
			Scaling: &kobev1.ScalingSpec{MinReady: ptr.To[int32](1), MaxClusters: ptr.To[int32](5)}}}
	rec := events.NewFakeRecorder(100)
	reconcile := func(now time.Time, queue int32, members ...kobev1.ClusterInstance) []string {
		t.Helper()
		s := &scope{pool: p, queue: queue, conds: conditions.Setter{Recorder: rec, Now: now}}
		s.plan = pool.Decide(pool.Input{Pool: p, Members: members, QueueDepth: queue, Wired: []kobev1.BackendType{kobev1.BackendSim}, Now: now})
		if err := (&Reconciler{}).setStatus(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		var out []string
		for len(rec.Events) > 0 {
			out = append(out, <-rec.Events)
		}
		return out
	}

	evs := reconcile(t0, 2)
	st := p.Status
	if st.TemplateRevision != 1 || st.TemplateHash != pool.TemplateHash(&p.Spec) {
		t.Errorf("first status: templateRevision %d templateHash %q, want 1 and the pool's", st.TemplateRevision, st.TemplateHash)
	}
	if st.LastPressure == nil || !st.LastPressure.Time.Equal(t0.Truncate(time.Second)) {
		t.Errorf("lastPressure = %v under a queue of 2, want %s", st.LastPressure, t0.Truncate(time.Second))
	}
	if c := meta.FindStatusCondition(st.Conditions, kobev1.ConditionProvisioning); c == nil || c.Reason != kobev1.ReasonMembersSucceeding {
		t.Errorf("Provisioning = %+v", c)
	}
	if meta.FindStatusCondition(st.Conditions, kobev1.ConditionDemandCovered) != nil {
		t.Error("DemandCovered set before any demand was measured")
	}
	if slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "Warning") }) {
		t.Errorf("Warning events on a pool filling up: %q", evs)
	}

	// Later: no queue, a measured demand deeper than minReady, members
	// failing, and a changed template with an outdated Ready member.
	old := *pool.NewMember(p, 0, pool.TemplateHash(&p.Spec))
	old.Status.Phase = kobev1.InstanceReady
	p.Spec.Backend.Sim = &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: time.Second}}
	p.Status.Demand = &kobev1.DemandStatus{Window: metav1.Duration{Duration: time.Hour}, BucketSeconds: 300, PeakArrivalsPerMinute: "1.00", ProvisionSeconds: 180, WarmTarget: 3}
	p.Status.Failures = 2
	evs = reconcile(t0.Add(time.Minute), 0, old)
	st = p.Status
	if st.TemplateRevision != 2 || st.TemplateHash != pool.TemplateHash(&p.Spec) || st.Outdated != 1 {
		t.Errorf("after a template change: templateRevision %d outdated %d, want 2 and 1", st.TemplateRevision, st.Outdated)
	}
	if !st.LastPressure.Time.Equal(t0.Truncate(time.Second)) {
		t.Errorf("lastPressure moved to %s without pressure", st.LastPressure.Time)
	}
	for _, want := range []string{"Warning " + kobev1.ReasonShallowerThanDemand + " ", "Warning " + kobev1.ReasonCreateFailures + " "} {
		if !slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, want) }) {
			t.Errorf("no %q event among %q", want, evs)
		}
	}

	// Nothing changed: no revision, no event.
	if evs = reconcile(t0.Add(2*time.Minute), 0, old); p.Status.TemplateRevision != 2 || len(evs) > 0 {
		t.Errorf("at rest: templateRevision %d, events %q", p.Status.TemplateRevision, evs)
	}

	// Without scaling the pool reports no DemandCovered.
	p.Spec.Scaling = nil
	reconcile(t0.Add(3*time.Minute), 0, old)
	if c := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionDemandCovered); c != nil {
		t.Errorf("DemandCovered = %+v on a pool without scaling", c)
	}
}
