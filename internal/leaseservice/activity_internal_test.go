package leaseservice

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// The activity log starts one write per lease at a time, and none for
// requests the last write (which the cache may not show yet) covers.
func TestActivityLogDedupes(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "l", UID: types.UID("uid-l"), CreationTimestamp: metav1.NewTime(t0)},
		Spec:       kobev1.ClusterLeaseSpec{IdleTimeout: &metav1.Duration{Duration: 4 * time.Minute}},
		Status:     kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, BoundAt: ptr.To(metav1.NewTime(t0))},
	}
	var a activityLog
	steps := []struct {
		name  string
		at    time.Duration
		want  bool
		after func()
	}{
		{"within a grain of the bind: nothing to write", 30 * time.Second, false, nil},
		{"a grain after the bind: a write starts", time.Minute, true, nil},
		{"while it is in flight: no second one", 2 * time.Minute, false, func() { a.end(l.UID, t0.Add(time.Minute+4*time.Minute), false) }},
		{"the cache still shows no deadline, but the write covers this request", 90 * time.Second, false, nil},
		{"a grain after the written deadline's request: the next write", 2 * time.Minute, true, func() { a.end(l.UID, time.Time{}, true) }},
		{"after a forget, the cache's view decides again", 70 * time.Second, true, nil},
	}
	for _, st := range steps {
		if got := a.begin(l, t0.Add(st.at)); got != st.want {
			t.Fatalf("%s: begin = %v, want %v", st.name, got, st.want)
		}
		if st.after != nil {
			st.after()
		}
	}
	a.entries = map[types.UID]*activityEntry{}
	for i := range activityPruneAt + 1 {
		a.entries[types.UID(rune(i))] = &activityEntry{written: t0}
	}
	a.entries["fresh"] = &activityEntry{written: t0.Add(48 * time.Hour)}
	a.begin(l, t0.Add(48*time.Hour))
	if _, ok := a.entries["fresh"]; !ok || len(a.entries) > 3 {
		t.Fatalf("prune kept %d entries (fresh kept: %v), want only the recent ones", len(a.entries), ok)
	}
}
