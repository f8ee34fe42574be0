package lease

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func idleLease(timeout time.Duration, boundAt *time.Time) *kobev1.ClusterLease {
	l := mkLease("idle", t0, kobev1.LeaseBound)
	l.Status.ExpiresAt = ptr.To(metav1.NewTime(t0.Add(time.Hour)))
	if boundAt != nil {
		l.Status.BoundAt = ptr.To(metav1.NewTime(*boundAt))
	} else {
		l.Status.Phase = kobev1.LeasePending
	}
	if timeout > 0 {
		l.Spec.IdleTimeout = &metav1.Duration{Duration: timeout}
	}
	return &l
}

func TestIdleRelease(t *testing.T) {
	const timeout = 4 * time.Minute // grain 1m
	bound := t0.Add(10 * time.Second)
	tests := []struct {
		name       string
		lease      *kobev1.ClusterLease
		activity   []time.Duration // after the bind
		now        time.Duration   // after the bind
		wantWrites int
		wantEnd    bool
		wantAfter  time.Duration
	}{
		{"never used: ends a timeout and a grain after the bind", idleLease(timeout, &bound), nil, 5 * time.Minute, 0, true, 0},
		{"never used, before that: recheck then", idleLease(timeout, &bound), nil, 4 * time.Minute, 0, false, time.Minute},
		{"requests within a grain of the bind cost nothing", idleLease(timeout, &bound), []time.Duration{time.Second, 30 * time.Second, 59 * time.Second}, 5*time.Minute - time.Second, 0, false, time.Second},
		{"a request a grain after the bind is recorded and keeps the lease", idleLease(timeout, &bound), []time.Duration{time.Minute}, 5*time.Minute + 30*time.Second, 1, false, 30 * time.Second},
		{"busy every 10s for 20 minutes: one write per grain, never ends", idleLease(timeout, &bound), every(10*time.Second, 20*time.Minute), 20 * time.Minute, 20, false, 5 * time.Minute},
		{"busy, then silent: ends between timeout and timeout plus a grain after the last request", idleLease(timeout, &bound), every(10*time.Second, 10*time.Minute), 10*time.Minute + 5*time.Minute, 10, true, 0},
		{"no idle timeout: nothing recorded, never idle", idleLease(0, &bound), []time.Duration{time.Hour}, 50 * time.Minute, 0, false, 9*time.Minute + 50*time.Second},
		{"a lease not bound yet is never idle", idleLease(timeout, nil), []time.Duration{time.Minute}, time.Hour, 0, false, 59*time.Minute + 50*time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writes := 0
			for _, a := range tt.activity {
				if RecordActivity(tt.lease, bound.Add(a)) {
					writes++
				}
			}
			if writes != tt.wantWrites {
				t.Errorf("writes = %d, want %d", writes, tt.wantWrites)
			}
			got := CheckEnd(tt.lease, time.Hour*2, bound.Add(tt.now))
			if got.End != tt.wantEnd || got.RecheckAfter != tt.wantAfter {
				t.Fatalf("CheckEnd = %+v, want end=%v after=%s", got, tt.wantEnd, tt.wantAfter)
			}
			if got.End && (got.Reason != kobev1.ReasonIdle || got.Phase != kobev1.LeaseExpired) {
				t.Fatalf("ended %s/%s, want Expired/Idle", got.Phase, got.Reason)
			}
		})
	}
}

// every lists the moments from step to until, every step.
func every(step, until time.Duration) []time.Duration {
	var out []time.Duration
	for d := step; d <= until; d += step {
		out = append(out, d)
	}
	return out
}

func TestResolveIdleTimeout(t *testing.T) {
	const m = time.Minute
	for _, tt := range []struct{ pool, rule, want time.Duration }{
		{0, 0, 0}, {5 * m, 0, 5 * m}, {0, 3 * m, 3 * m}, {5 * m, 3 * m, 3 * m}, {2 * m, 3 * m, 2 * m},
	} {
		if got := ResolveIdleTimeout(tt.pool, tt.rule); got != tt.want {
			t.Errorf("ResolveIdleTimeout(%s, %s) = %s, want %s", tt.pool, tt.rule, got, tt.want)
		}
	}
}
