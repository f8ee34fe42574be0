package lease

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func heartbeatLease(timeout time.Duration) *kobev1.ClusterLease {
	l := mkLease("hb", t0, kobev1.LeaseBound)
	l.Status.ExpiresAt = ptr.To(metav1.NewTime(t0.Add(time.Hour)))
	if timeout > 0 {
		l.Spec.HeartbeatTimeout = &metav1.Duration{Duration: timeout}
	}
	return &l
}

func TestRecordHeartbeat(t *testing.T) {
	const timeout = 2 * time.Minute // grain 30s
	tests := []struct {
		name         string
		recorded     *time.Time // status.heartbeatDeadline before the beat
		beat         time.Time
		wantWrite    bool
		wantDeadline time.Time
	}{
		{"first beat within a grain of the create: nothing to write", nil, t0.Add(29 * time.Second), false, t0.Add(timeout)},
		{"first beat a grain after the create", nil, t0.Add(30 * time.Second), true, t0.Add(30*time.Second + timeout)},
		{"beat just short of a grain past the recorded deadline", ptr.To(t0.Add(3 * time.Minute)), t0.Add(time.Minute + 29*time.Second), false, t0.Add(3 * time.Minute)},
		{"beat a grain past the recorded deadline", ptr.To(t0.Add(3 * time.Minute)), t0.Add(90 * time.Second), true, t0.Add(90*time.Second + timeout)},
		{"sub-second beat is rounded up, never down", nil, t0.Add(40*time.Second + 300*time.Millisecond), true, t0.Add(41*time.Second + timeout)},
		{"a late beat after a long silence still moves it", nil, t0.Add(10 * time.Minute), true, t0.Add(10*time.Minute + timeout)},
		{"a beat from a clock behind never moves it back", ptr.To(t0.Add(10 * time.Minute)), t0, false, t0.Add(10 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := heartbeatLease(timeout)
			if tt.recorded != nil {
				l.Status.HeartbeatDeadline = ptr.To(metav1.NewTime(*tt.recorded))
			}
			if got := RecordHeartbeat(l, tt.beat); got != tt.wantWrite {
				t.Fatalf("RecordHeartbeat = %v, want %v", got, tt.wantWrite)
			}
			if got := HeartbeatDeadline(l); !got.Equal(tt.wantDeadline) {
				t.Fatalf("deadline = %s, want %s", got, tt.wantDeadline)
			}
		})
	}
	t.Run("no heartbeat timeout: nothing recorded", func(t *testing.T) {
		l := heartbeatLease(0)
		if RecordHeartbeat(l, t0.Add(time.Hour)) || l.Status.HeartbeatDeadline != nil || !HeartbeatEndsAt(l).IsZero() {
			t.Fatalf("a lease without heartbeatTimeout recorded a beat: %+v", l.Status)
		}
	})
}

// A holder beating every interval never sees its lease end, writes at most
// once per grain, and once it stops, the lease ends between timeout and
// timeout plus a grain after its last beat.
func TestHeartbeatsKeepALeaseAndSilenceEndsIt(t *testing.T) {
	for _, timeout := range []time.Duration{10 * time.Second, 2 * time.Minute, 5 * time.Minute, 24 * time.Hour} {
		t.Run(timeout.String(), func(t *testing.T) {
			l := heartbeatLease(timeout)
			l.Status.ExpiresAt = ptr.To(metav1.NewTime(t0.Add(1000 * timeout)))
			interval := max(timeout/6, time.Second)
			writes, beats := 0, 0
			var last time.Time
			for now := t0.Add(interval); now.Before(t0.Add(20 * timeout)); now = now.Add(interval) {
				if e := CheckEnd(l, 0, now); e.End {
					t.Fatalf("lease ended at +%s while beating every %s: %+v", now.Sub(t0), interval, e)
				}
				beats++
				if RecordHeartbeat(l, now) {
					writes++
				}
				last = now
			}
			if maxWrites := beats/int(HeartbeatGrain(timeout)/interval) + 1; writes > maxWrites {
				t.Fatalf("%d writes for %d beats, want at most %d (one per grain)", writes, beats, maxWrites)
			}
			if e := CheckEnd(l, 0, last.Add(timeout-time.Second)); e.End {
				t.Fatalf("lease ended %s after the last beat, before its timeout %s", timeout-time.Second, timeout)
			}
			e := CheckEnd(l, 0, last.Add(timeout+HeartbeatGrain(timeout)+time.Second))
			if !e.End || e.Reason != kobev1.ReasonHeartbeatMissed || e.Phase != kobev1.LeaseExpired {
				t.Fatalf("lease silent for timeout plus a grain: %+v, want Expired/HeartbeatMissed", e)
			}
		})
	}
}

func TestCheckEndWithHeartbeats(t *testing.T) {
	const timeout = time.Minute // grain 15s; never beaten: ends at t0+75s
	queued := heartbeatLease(timeout)
	queued.Status.Phase = kobev1.LeasePending
	queued.Status.ExpiresAt = nil
	tests := []struct {
		name       string
		lease      *kobev1.ClusterLease
		now        time.Time
		wantEnd    bool
		wantReason string
		wantAfter  time.Duration
	}{
		{"bound, silent, before its end: recheck at the heartbeat end, not the expiry", heartbeatLease(timeout), t0.Add(time.Minute), false, "", 15 * time.Second},
		{"bound, silent past timeout plus grain", heartbeatLease(timeout), t0.Add(75 * time.Second), true, kobev1.ReasonHeartbeatMissed, 0},
		{"queued, silent: a queued lease ends too", queued, t0.Add(80 * time.Second), true, kobev1.ReasonHeartbeatMissed, 0},
		{"queued, silent, before its end: recheck at the heartbeat end", queued, t0.Add(70 * time.Second), false, "", 5 * time.Second},
		{"expiry comes before the heartbeat end", func() *kobev1.ClusterLease {
			l := heartbeatLease(timeout)
			l.Status.ExpiresAt = ptr.To(metav1.NewTime(t0.Add(30 * time.Second)))
			return l
		}(), t0.Add(30 * time.Second), true, kobev1.ReasonExpired, 0},
		{"ended lease: nothing", func() *kobev1.ClusterLease {
			l := heartbeatLease(timeout)
			l.Status.Phase = kobev1.LeaseReleased
			return l
		}(), t0.Add(time.Hour), false, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckEnd(tt.lease, time.Hour, tt.now)
			if got.End != tt.wantEnd || got.Reason != tt.wantReason || got.RecheckAfter != tt.wantAfter {
				t.Fatalf("CheckEnd = %+v, want end=%v reason=%q after=%s", got, tt.wantEnd, tt.wantReason, tt.wantAfter)
			}
		})
	}
}

func TestResolveHeartbeatTimeout(t *testing.T) {
	const m = time.Minute
	tests := []struct {
		name                         string
		requested, poolDefault, cap_ time.Duration
		want                         time.Duration
	}{
		{"nothing anywhere: no heartbeats", 0, 0, 0, 0},
		{"requested", 2 * m, 0, 0, 2 * m},
		{"pool default when none requested", 0, 5 * m, 0, 5 * m},
		{"requested wins over the pool default, even longer", 10 * m, 5 * m, 0, 10 * m},
		{"rule cap clamps a longer request", 10 * m, 0, 3 * m, 3 * m},
		{"rule cap clamps a longer pool default", 0, 10 * m, 3 * m, 3 * m},
		{"rule cap requires heartbeats when none would be", 0, 0, 3 * m, 3 * m},
		{"a shorter request stays under the cap", m, 0, 3 * m, m},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ResolveHeartbeatTimeout(tt.requested, tt.poolDefault, tt.cap_); got != tt.want {
				t.Fatalf("ResolveHeartbeatTimeout(%s, %s, %s) = %s, want %s", tt.requested, tt.poolDefault, tt.cap_, got, tt.want)
			}
		})
	}
}
