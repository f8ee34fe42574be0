package lease

import (
	"testing"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// queuedLease is a lease created at the start of second t0 whose queued-at
// annotation says it was queued at t0+offset.
func queuedLease(name string, offset time.Duration) kobev1.ClusterLease {
	l := mkLease(name, t0, kobev1.LeasePending)
	StampQueuedAt(&l, t0.Add(offset))
	return l
}

func withAnnotation(name, value string) kobev1.ClusterLease {
	l := mkLease(name, t0, kobev1.LeasePending)
	l.Annotations = map[string]string{kobev1.AnnotationQueuedAt: value}
	return l
}

func TestStampAndQueuedAt(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	tests := []struct {
		name  string
		lease kobev1.ClusterLease
		want  time.Time
	}{
		{"stamped: nanoseconds kept", queuedLease("a", 123456789*time.Nanosecond), t0.Add(123456789 * time.Nanosecond)},
		{"stamp in another zone is the same instant", func() kobev1.ClusterLease {
			l := mkLease("z", t0, "")
			StampQueuedAt(&l, t0.Add(time.Millisecond).In(berlin))
			return l
		}(), t0.Add(time.Millisecond)},
		{"stamp just before the creation second (create took a moment)", queuedLease("early", -300*time.Millisecond), t0.Add(-300 * time.Millisecond)},
		{"no annotation (kubectl): creationTimestamp", mkLease("kubectl", t0, ""), t0},
		{"unparsable annotation: creationTimestamp", withAnnotation("junk", "yesterday"), t0},
		{"empty annotation: creationTimestamp", withAnnotation("empty", ""), t0},
		{"stamp far in the past (queue jumping): creationTimestamp", queuedLease("jumper", -time.Hour), t0},
		{"stamp far in the future (never time out): creationTimestamp", queuedLease("future", time.Hour), t0},
		{"stamp at the tolerance edge before creation: believed", queuedLease("edge-", -QueuedAtTolerance), t0.Add(-QueuedAtTolerance)},
		{"stamp beyond the tolerance after the creation second: creationTimestamp", queuedLease("edge+", time.Second+QueuedAtTolerance), t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := QueuedAt(&tt.lease); !got.Equal(tt.want) {
				t.Fatalf("QueuedAt = %s, want %s", got.Format(time.RFC3339Nano), tt.want.Format(time.RFC3339Nano))
			}
		})
	}

	l := mkLease("fmt", t0, "")
	StampQueuedAt(&l, t0.Add(5*time.Millisecond).In(berlin))
	if got, want := l.Annotations[kobev1.AnnotationQueuedAt], "2026-11-29T10:00:00.005Z"; got != want {
		t.Errorf("annotation = %q, want RFC 3339 nanoseconds in UTC %q", got, want)
	}
}

// TestQueueOrderBelowOneSecond: leases created within the same second keep
// the order they were queued in, not their names' order; a lease without the
// annotation sits at its creation second.
func TestQueueOrderBelowOneSecond(t *testing.T) {
	all := []kobev1.ClusterLease{
		queuedLease("a-third", 700*time.Millisecond),
		queuedLease("z-first", 100*time.Millisecond),
		queuedLease("m-second", 100*time.Millisecond+time.Nanosecond),
		mkLease("kubectl", t0, kobev1.LeasePending), // queued at t0 exactly
		queuedLease("b-tie", 700*time.Millisecond),  // same instant as a-third: by name
		queuedLease("next-second", 1200*time.Millisecond),
	}
	q := Queue(all, "dev")
	want := []string{"kubectl", "z-first", "m-second", "a-third", "b-tie", "next-second"}
	if got := names(q); !equal(got, want) {
		t.Fatalf("queue = %v, want %v", got, want)
	}
	for i, l := range want {
		for j := range all {
			if all[j].Name == l {
				if got := Position(q, &all[j]); got != int32(i+1) {
					t.Errorf("Position(%s) = %d, want %d", l, got, i+1)
				}
			}
		}
	}
	// A lease the cache has not seen yet, queued at the same instant as z-first.
	between := queuedLease("between", 100*time.Millisecond) // ties with z-first
	if got := Position(q, &between); got != 2 {
		t.Errorf("Position(between, tie with z-first) = %d, want 2 (before z-first by name)", got)
	}

	// Every replica sees the same order whatever order its cache lists in.
	reversed := make([]kobev1.ClusterLease, len(all))
	for i := range all {
		reversed[len(all)-1-i] = all[i]
	}
	if got := names(Queue(reversed, "dev")); !equal(got, want) {
		t.Fatalf("queue from reversed list = %v, want %v", got, want)
	}
}

func TestQueueTimeoutAndInFlightCountFromQueuedAt(t *testing.T) {
	// Created in second t0, queued at t0+900ms.
	l := queuedLease("l", 900*time.Millisecond)
	tests := []struct {
		now       time.Time
		wantEnd   bool
		wantAfter time.Duration
	}{
		{t0.Add(time.Minute), false, time.Minute + 900*time.Millisecond},
		{t0.Add(2*time.Minute + 899*time.Millisecond), false, time.Millisecond},
		{t0.Add(2*time.Minute + 900*time.Millisecond), true, 0},
	}
	for _, tt := range tests {
		got := CheckEnd(&l, 2*time.Minute, tt.now)
		if got.End != tt.wantEnd || got.RecheckAfter != tt.wantAfter {
			t.Errorf("CheckEnd at %s = %+v, want end=%v after=%s", tt.now.Format(time.RFC3339Nano), got, tt.wantEnd, tt.wantAfter)
		}
	}

	fast := queuedLease("fast", 900*time.Millisecond)
	fast.Status.Phase = ""
	fast.Annotations[kobev1.AnnotationFastPath] = "true"
	if in, left := InFlight(&fast, t0.Add(InFlightGrace)); !in || left != 900*time.Millisecond {
		t.Errorf("InFlight at t0+grace = %v %s, want true with 900ms left (grace counts from queued-at)", in, left)
	}
	if in, _ := InFlight(&fast, t0.Add(InFlightGrace+900*time.Millisecond)); in {
		t.Error("InFlight after grace from queued-at = true, want false")
	}
}

func TestMayBindNow(t *testing.T) {
	for _, tc := range []struct {
		position  int32
		available int
		want      bool
	}{
		{position: 1, available: 0, want: true}, // first: bind or queue by what the binder finds
		{position: 1, available: 3, want: true},
		{position: 2, available: 1, want: false}, // the one member is for the lease ahead
		{position: 2, available: 2, want: true},  // one for the lease ahead, one for this
		{position: 5, available: 4, want: false},
		{position: 5, available: 5, want: true},
		{position: 3, available: 0, want: false},
	} {
		if got := MayBindNow(tc.position, tc.available); got != tc.want {
			t.Errorf("MayBindNow(%d, %d) = %v, want %v", tc.position, tc.available, got, tc.want)
		}
	}
}
