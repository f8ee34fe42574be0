package clusterpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestHoldStatus(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	warm := func(status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: kobev1.ConditionWarm, Status: status, Reason: reason}
	}
	base := kobev1.ClusterPoolStatus{ObservedGeneration: 3, Ready: 2, NextOrdinal: 5, TemplateHash: "h",
		Conditions: []metav1.Condition{warm(metav1.ConditionTrue, "Warm")}}
	with := func(change func(*kobev1.ClusterPoolStatus)) *kobev1.ClusterPoolStatus {
		s := base.DeepCopy()
		change(s)
		return s
	}
	counts := with(func(s *kobev1.ClusterPoolStatus) { s.Ready, s.Leased = 1, 1 })
	for _, tc := range []struct {
		name      string
		after     *kobev1.ClusterPoolStatus
		lastWrite time.Time
		want      time.Duration
	}{
		{"never written by this replica: now", counts, time.Time{}, 0},
		{"written over a second ago: now", counts, now.Add(-1500 * time.Millisecond), 0},
		{"counts 300 ms after a write: wait the rest", counts, now.Add(-300 * time.Millisecond), 700 * time.Millisecond},
		{"filling up is routine: wait", with(func(s *kobev1.ClusterPoolStatus) {
			s.Ready = 1
			s.Conditions = []metav1.Condition{warm(metav1.ConditionFalse, kobev1.ReasonFilling)}
		}), now.Add(-100 * time.Millisecond), 900 * time.Millisecond},
		{"a spec change shows at once", with(func(s *kobev1.ClusterPoolStatus) { s.ObservedGeneration = 4 }), now.Add(-100 * time.Millisecond), 0},
		{"an ordinal reservation at once", with(func(s *kobev1.ClusterPoolStatus) { s.NextOrdinal = 6 }), now.Add(-100 * time.Millisecond), 0},
		{"a counted failure at once", with(func(s *kobev1.ClusterPoolStatus) {
			s.Failures, s.CountedFailures = 1, []string{"pool-x-4"}
		}), now.Add(-100 * time.Millisecond), 0},
		{"new pressure at once", with(func(s *kobev1.ClusterPoolStatus) { s.LastPressure = ptr.To(metav1.NewTime(now)) }), now.Add(-100 * time.Millisecond), 0},
		{"a condition going to a Warning at once", with(func(s *kobev1.ClusterPoolStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: kobev1.ConditionCapacity, Status: metav1.ConditionFalse, Reason: "HostCapacityReached"})
		}), now.Add(-100 * time.Millisecond), 0},
	} {
		if got := holdStatus(&base, tc.after, tc.lastWrite, now); got != tc.want {
			t.Errorf("%s: holdStatus = %v, want %v", tc.name, got, tc.want)
		}
	}
}
