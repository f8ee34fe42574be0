package lease

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestMarkQueuedThenHoldPosition(t *testing.T) {
	markedAt := t0.Add(10 * time.Second)
	marked := func(pos int32) kobev1.ClusterLease {
		l := mkLease("a", t0, "")
		MarkQueued(&l, pos, markedAt)
		return l
	}
	tests := []struct {
		name      string
		lease     func() kobev1.ClusterLease
		pos       int32
		lastWrite time.Time
		now       time.Time
		want      time.Duration
	}{
		{"never marked: write at once", func() kobev1.ClusterLease { return mkLease("a", t0, "") }, 3, time.Time{}, markedAt, 0},
		{"same position: nothing to hold", func() kobev1.ClusterLease { return marked(3) }, 3, time.Time{}, markedAt.Add(time.Second), 0},
		{"moved a second after the mark: waits for the rest", func() kobev1.ClusterLease { return marked(3) }, 2, time.Time{}, markedAt.Add(time.Second), PositionEvery - time.Second},
		{"moved after PositionEvery: write", func() kobev1.ClusterLease { return marked(3) }, 2, time.Time{}, markedAt.Add(PositionEvery), 0},
		{"this process wrote it later than the mark", func() kobev1.ClusterLease { return marked(3) }, 1, markedAt.Add(4 * time.Second), markedAt.Add(5 * time.Second), PositionEvery - time.Second},
		{"another reason (pool missing) is not a move", func() kobev1.ClusterLease {
			l := marked(3)
			c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionBound)
			c.Reason = kobev1.ReasonPoolNotFound
			return l
		}, 2, time.Time{}, markedAt.Add(time.Second), 0},
		{"a spec change is written at once", func() kobev1.ClusterLease {
			l := marked(3)
			l.Generation++
			return l
		}, 2, time.Time{}, markedAt.Add(time.Second), 0},
		{"bound meanwhile: not held", func() kobev1.ClusterLease {
			l := marked(3)
			l.Status.Phase = kobev1.LeaseBound
			return l
		}, 2, time.Time{}, markedAt.Add(time.Second), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.lease()
			if got := HoldPosition(&l, tt.pos, tt.lastWrite, tt.now); got != tt.want {
				t.Fatalf("HoldPosition = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMarkQueuedIsTheSameMarkTwice(t *testing.T) {
	l := mkLease("a", t0, "")
	MarkQueued(&l, 2, t0)
	first := l.DeepCopy()
	// The controller's first look, a moment later, at the same position.
	MarkQueued(&l, 2, t0.Add(time.Second))
	if l.Status.Phase != kobev1.LeasePending || l.Status.QueuePosition != 2 {
		t.Fatalf("status = %s at %d, want Pending at 2", l.Status.Phase, l.Status.QueuePosition)
	}
	c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionBound)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kobev1.ReasonQueued || !c.LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("Bound condition = %+v, want False/Queued since %s", c, t0)
	}
	if d := meta.FindStatusCondition(first.Status.Conditions, kobev1.ConditionBound); *d != *c {
		t.Fatalf("the second mark changed the condition: %+v -> %+v", d, c)
	}
}
