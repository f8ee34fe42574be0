package lease

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Heartbeats: a lease with spec.heartbeatTimeout ends (HeartbeatMissed) once
// its holder has been silent for that long. A heartbeat is not one API write:
// status.heartbeatDeadline (last recorded beat + timeout) is written only when
// a beat moves it forward by at least the grain (a quarter of the timeout),
// so a holder that beats every few seconds costs four writes per timeout.
// The price is precision: the recorded deadline lags the true one by up to a
// grain, so the lease ends a grain after the recorded deadline, between
// timeout and timeout plus a grain after the last beat, never before.

// Bounds of spec.heartbeatTimeout (the CRD holds the same).
const (
	MinHeartbeatTimeout = 10 * time.Second
	MaxHeartbeatTimeout = 24 * time.Hour
)

// HeartbeatGrain is how far a beat must move the recorded deadline before it
// is written, and so how late after the timeout a silent lease may end.
func HeartbeatGrain(timeout time.Duration) time.Duration { return timeout / 4 }

// HeartbeatTimeout is l's heartbeat timeout; ok is false when l has none.
func HeartbeatTimeout(l *kobev1.ClusterLease) (time.Duration, bool) {
	if l.Spec.HeartbeatTimeout == nil || l.Spec.HeartbeatTimeout.Duration <= 0 {
		return 0, false
	}
	return l.Spec.HeartbeatTimeout.Duration, true
}

// HeartbeatDeadline is the recorded deadline: status.heartbeatDeadline, or,
// before any beat was recorded, the lease's creation plus its timeout (the
// create counts as the first beat).
func HeartbeatDeadline(l *kobev1.ClusterLease) time.Time {
	if d := l.Status.HeartbeatDeadline; d != nil {
		return d.Time
	}
	timeout, _ := HeartbeatTimeout(l)
	return l.CreationTimestamp.Add(timeout)
}

// HeartbeatEndsAt is when a silent lease ends: the recorded deadline plus a
// grain. The zero time when l has no heartbeat timeout.
func HeartbeatEndsAt(l *kobev1.ClusterLease) time.Time {
	timeout, ok := HeartbeatTimeout(l)
	if !ok {
		return time.Time{}
	}
	return HeartbeatDeadline(l).Add(HeartbeatGrain(timeout))
}

// RecordHeartbeat applies a beat at now to l in memory and reports whether
// the status changed, i.e. whether the beat must be written: only when it
// moves the recorded deadline forward by a grain or more.
func RecordHeartbeat(l *kobev1.ClusterLease, now time.Time) bool {
	timeout, ok := HeartbeatTimeout(l)
	if !ok {
		return false
	}
	next, moved := advanceDeadline(HeartbeatDeadline(l), timeout, now)
	if moved {
		l.Status.HeartbeatDeadline = next
	}
	return moved
}

// advanceDeadline is the deadline a sign of life at now earns (now plus
// timeout, rounded up to the second the API keeps, never earlier than the
// sign earned), and whether it moves recorded by a grain or more: the
// coarse recording of heartbeats and of connect-proxy activity.
func advanceDeadline(recorded time.Time, timeout time.Duration, now time.Time) (*metav1.Time, bool) {
	next := now.Add(timeout)
	if next.Sub(recorded) < HeartbeatGrain(timeout) {
		return nil, false
	}
	if r := next.Truncate(time.Second); r.Before(next) {
		next = r.Add(time.Second)
	}
	t := metav1.NewTime(next.UTC())
	return &t, true
}

// ResolveHeartbeatTimeout is the heartbeat timeout a new lease gets:
// requested (0: none asked), else the pool's default (0: none), then capped
// by the caller's rule (0: no cap). A rule with a cap requires heartbeats:
// a lease that would have none gets the cap, as a longer one is clamped to
// it, the way a rule's maxTtl clamps a ttl.
func ResolveHeartbeatTimeout(requested, poolDefault, ruleMax time.Duration) time.Duration {
	d := requested
	if d <= 0 {
		d = poolDefault
	}
	if ruleMax > 0 && (d <= 0 || d > ruleMax) {
		d = ruleMax
	}
	return max(d, 0)
}
