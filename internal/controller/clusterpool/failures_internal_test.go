package clusterpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/controller/conditions"
	"github.com/kunobi-ninja/kobe/internal/controller/patch"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestCountFailuresWritesOnce: the step writes the pool's status when it
// counted a failure, and the failure metric goes up once, however often
// the pool is reconciled with the member still there.
func TestCountFailuresWritesOnce(t *testing.T) {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "counts", Namespace: "ns", Generation: 1},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](1), Backend: kobev1.BackendSpec{Type: kobev1.BackendSim}}}
	m := pool.NewMember(p, 0, pool.TemplateHash(&p.Spec))
	at := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	m.Status.Phase, m.Status.LastPhaseChange = kobev1.InstanceRecycling, &at
	m.Status.Conditions = []metav1.Condition{{Type: kobev1.ConditionReady, Status: metav1.ConditionFalse, Reason: kobev1.ReasonProvisionFailed, Message: "boom"}}
	c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(p).WithStatusSubresource(&kobev1.ClusterPool{}).Build()
	r := &Reconciler{Client: c}

	for range 3 {
		got := &kobev1.ClusterPool{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		s := &scope{pool: got, patch: patch.New(c, got), conds: conditions.Setter{Recorder: events.NewFakeRecorder(10), Now: at.Time}}
		if err := r.countFailures(t.Context(), s, []kobev1.ClusterInstance{*m}); err != nil {
			t.Fatal(err)
		}
	}
	got := &kobev1.ClusterPool{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	if st := got.Status; st.Failures != 1 || len(st.CountedFailures) != 1 || st.CountedFailures[0] != m.Name || st.LastFailure == nil || st.LastFailure.Member != m.Name {
		t.Errorf("written status: failures %d, countedFailures %v, lastFailure %+v; want one failure of %s", st.Failures, st.CountedFailures, st.LastFailure, m.Name)
	}
	if n := memberFailures(t, "ns", "counts", kobev1.ReasonProvisionFailed); n != 1 {
		t.Errorf("kobe_pool_member_failures_total = %v after three reconciles, want 1", n)
	}
}

// memberFailures reads kobe_pool_member_failures_total for a pool and reason
// from the registry the operator serves.
func memberFailures(t *testing.T, ns, pool, reason string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"namespace": ns, "pool": pool, "reason": reason}
	for _, f := range families {
		if f.GetName() != "kobe_pool_member_failures_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if want[l.GetName()] == l.GetValue() {
					match++
				}
			}
			if match == len(want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
