package clusterpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestMemberChanged(t *testing.T) {
	base := &kobev1.ClusterInstance{Status: kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady,
		LastHealthCheck: &metav1.Time{Time: time.Unix(100, 0)}}}
	cases := []struct {
		name string
		mut  func(*kobev1.ClusterInstance)
		want bool
	}{
		{"a successful probe", func(m *kobev1.ClusterInstance) { m.Status.LastHealthCheck = &metav1.Time{Time: time.Unix(130, 0)} }, false},
		{"a failed probe", func(m *kobev1.ClusterInstance) { m.Status.HealthFailures = 1 }, true},
		{"a phase change", func(m *kobev1.ClusterInstance) { m.Status.Phase = kobev1.InstanceLeased }, true},
		{"a bind", func(m *kobev1.ClusterInstance) { m.Spec.LeaseRef = &kobev1.LeaseBinding{Name: "l"} }, true},
		{"deletion", func(m *kobev1.ClusterInstance) { m.DeletionTimestamp = &metav1.Time{Time: time.Unix(200, 0)} }, true},
		{"a gate condition", func(m *kobev1.ClusterInstance) {
			m.Status.Conditions = []metav1.Condition{{Type: "ExternalSignal", Status: metav1.ConditionTrue}}
		}, true},
	}
	for _, c := range cases {
		n := base.DeepCopy()
		c.mut(n)
		if got := memberChanged(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != c.want {
			t.Errorf("%s: memberChanged = %v, want %v", c.name, got, c.want)
		}
	}
}
