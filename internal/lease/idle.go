package lease

import (
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Idle release: a bound lease with spec.idleTimeout ends (reason Idle) once
// nothing went through the connect proxy to its member for that long. The
// activity is recorded the way heartbeats are (advanceDeadline): into
// status.idleDeadline, written only when a request moves it by a grain (a
// quarter of the timeout), so a busy lease costs four writes per timeout,
// not one per request; the lease ends between timeout and timeout plus a
// grain after its last request. The clock starts at the bind: a lease never
// used ends a timeout (and a grain) after it was bound.

// IdleTimeout is l's idle timeout; ok is false when l has none.
func IdleTimeout(l *kobev1.ClusterLease) (time.Duration, bool) {
	if l.Spec.IdleTimeout == nil || l.Spec.IdleTimeout.Duration <= 0 {
		return 0, false
	}
	return l.Spec.IdleTimeout.Duration, true
}

// IdleDeadline is the recorded idle deadline: status.idleDeadline, or,
// before any activity was recorded, the bind plus the timeout. The zero
// time for a lease that is not bound yet.
func IdleDeadline(l *kobev1.ClusterLease) time.Time {
	if d := l.Status.IdleDeadline; d != nil {
		return d.Time
	}
	timeout, _ := IdleTimeout(l)
	if l.Status.BoundAt == nil {
		return time.Time{}
	}
	return l.Status.BoundAt.Add(timeout)
}

// IdleEndsAt is when a bound lease left idle ends: the recorded deadline
// plus a grain. The zero time when l has no idle timeout or is not bound.
func IdleEndsAt(l *kobev1.ClusterLease) time.Time {
	timeout, ok := IdleTimeout(l)
	if !ok || l.Status.BoundAt == nil {
		return time.Time{}
	}
	return IdleDeadline(l).Add(HeartbeatGrain(timeout))
}

// RecordActivity applies a request through the connect proxy at now to l in
// memory and reports whether the status changed, i.e. must be written.
func RecordActivity(l *kobev1.ClusterLease, now time.Time) bool {
	timeout, ok := IdleTimeout(l)
	if !ok || l.Status.BoundAt == nil {
		return false
	}
	next, moved := advanceDeadline(IdleDeadline(l), timeout, now)
	if moved {
		l.Status.IdleDeadline = next
	}
	return moved
}

// ActivityWriteDue reports whether a request at now must be written for
// l: whether it moves the idle deadline by a grain past the later of the
// recorded one and written, a deadline written that the caller's copy of l
// may not show yet. No copy of l is made: it runs on every proxied request.
func ActivityWriteDue(l *kobev1.ClusterLease, written, now time.Time) bool {
	timeout, ok := IdleTimeout(l)
	if !ok || l.Status.BoundAt == nil {
		return false
	}
	recorded := IdleDeadline(l)
	if written.After(recorded) {
		recorded = written
	}
	_, due := advanceDeadline(recorded, timeout, now)
	return due
}

// ResolveIdleTimeout is the idle timeout of a new lease of a Proxy-access
// pool: the shorter of the pool's and the caller's rule's, where 0 means
// unset; 0 when neither sets one.
func ResolveIdleTimeout(poolTimeout, ruleTimeout time.Duration) time.Duration {
	switch {
	case poolTimeout <= 0:
		return max(ruleTimeout, 0)
	case ruleTimeout <= 0:
		return poolTimeout
	}
	return min(poolTimeout, ruleTimeout)
}
