package lease

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func mkLease(name string, created time.Time, phase kobev1.LeasePhase) kobev1.ClusterLease {
	return kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec:       kobev1.ClusterLeaseSpec{Pool: "dev"},
		Status:     kobev1.ClusterLeaseStatus{Phase: phase},
	}
}

func TestQueueOrderAndPosition(t *testing.T) {
	all := []kobev1.ClusterLease{
		mkLease("c", t0.Add(2*time.Second), kobev1.LeasePending),
		mkLease("a", t0, ""),
		mkLease("bound", t0.Add(-time.Minute), kobev1.LeaseBound),
		mkLease("b", t0, kobev1.LeasePending),
		mkLease("ended", t0.Add(-time.Hour), kobev1.LeaseReleased),
	}
	other := mkLease("other-pool", t0.Add(-time.Hour), kobev1.LeasePending)
	other.Spec.Pool = "ci"
	all = append(all, other)
	deleting := mkLease("deleting", t0.Add(-time.Hour), kobev1.LeasePending)
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	all = append(all, deleting)

	q := Queue(all, "dev")
	var names []string
	for _, l := range q {
		names = append(names, l.Name)
	}
	if want := []string{"a", "b", "c"}; !equal(names, want) {
		t.Fatalf("queue = %v, want %v (FIFO, ties by name, bound/ended/deleting/other pools excluded)", names, want)
	}
	tests := []struct {
		lease kobev1.ClusterLease
		want  int32
	}{
		{all[1], 1}, // a
		{all[3], 2}, // b
		{all[0], 3}, // c
		{mkLease("new", t0.Add(time.Hour), ""), 4},    // not in the list yet: behind everyone
		{mkLease("early", t0.Add(-time.Hour), ""), 1}, // created before everyone
		{mkLease("aa", t0, kobev1.LeasePending), 2},   // tie with a and b: name order
	}
	for _, tt := range tests {
		if got := Position(q, &tt.lease); got != tt.want {
			t.Errorf("Position(%s) = %d, want %d", tt.lease.Name, got, tt.want)
		}
	}
}

func TestCheckEnd(t *testing.T) {
	bound := func(expires time.Time) *kobev1.ClusterLease {
		l := mkLease("l", t0, kobev1.LeaseBound)
		l.Status.ExpiresAt = ptr.To(metav1.NewTime(expires))
		return &l
	}
	queued := mkLease("q", t0, kobev1.LeasePending)
	released := mkLease("r", t0, kobev1.LeaseReleased)
	tests := []struct {
		name       string
		lease      *kobev1.ClusterLease
		now        time.Time
		wantEnd    bool
		wantReason string
		wantAfter  time.Duration
	}{
		{"bound before expiry", bound(t0.Add(time.Minute)), t0, false, "", time.Minute},
		{"bound at expiry", bound(t0.Add(time.Minute)), t0.Add(time.Minute), true, kobev1.ReasonExpired, 0},
		{"bound long after expiry (operator was down)", bound(t0), t0.Add(time.Hour), true, kobev1.ReasonExpired, 0},
		{"queued within timeout", &queued, t0.Add(4 * time.Minute), false, "", time.Minute},
		{"queued past timeout", &queued, t0.Add(5 * time.Minute), true, kobev1.ReasonQueueTimeout, 0},
		{"already ended", &released, t0.Add(time.Hour), false, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckEnd(tt.lease, 5*time.Minute, tt.now)
			if got.End != tt.wantEnd || got.Reason != tt.wantReason || got.RecheckAfter != tt.wantAfter {
				t.Fatalf("CheckEnd = %+v, want end=%v reason=%q after=%s", got, tt.wantEnd, tt.wantReason, tt.wantAfter)
			}
			if got.End && got.Phase != kobev1.LeaseExpired {
				t.Fatalf("phase = %s, want Expired", got.Phase)
			}
		})
	}
}

func TestTTLAndDefaults(t *testing.T) {
	pool := &kobev1.ClusterPool{Spec: kobev1.ClusterPoolSpec{TTL: &metav1.Duration{Duration: 2 * time.Hour}}}
	l := mkLease("l", t0, "")
	if got := TTL(&l, pool); got != 2*time.Hour {
		t.Errorf("TTL without own ttl = %s, want the pool's 2h", got)
	}
	l.Spec.TTL = &metav1.Duration{Duration: 20 * time.Second}
	if got := TTL(&l, pool); got != 20*time.Second {
		t.Errorf("TTL = %s, want 20s", got)
	}
	if got := QueueTimeout(nil); got != DefaultQueueTimeout {
		t.Errorf("QueueTimeout(nil) = %s", got)
	}
	if got := MaxExtensions(&l); got != DefaultMaxExtensions {
		t.Errorf("MaxExtensions = %d", got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWaitingSkipsLeasesOnTheFastPath(t *testing.T) {
	now := t0.Add(time.Minute)
	marked := mkLease("marked", now.Add(-time.Second), kobev1.LeasePending)
	fresh := mkLease("fresh", now.Add(-time.Second), "")
	fresh.Annotations = map[string]string{kobev1.AnnotationFastPath: "true"}
	stale := mkLease("stale", now.Add(-time.Minute), "")
	stale.Annotations = map[string]string{kobev1.AnnotationFastPath: "true"}
	kubectl := mkLease("kubectl", now.Add(-time.Second), "")
	got := Waiting([]*kobev1.ClusterLease{&marked, &fresh, &stale, &kubectl}, now)
	if want := []string{"marked", "stale", "kubectl"}; !equal(names(got), want) {
		t.Fatalf("Waiting = %v, want %v", names(got), want)
	}
}

func names(ls []*kobev1.ClusterLease) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}
