package lease

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/fields"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// DefaultMaxExtensions applies when neither the lease nor its policy sets one.
const DefaultMaxExtensions int32 = 2

// DefaultQueueTimeout ends a lease that waited this long for a member when its
// pool sets no scaling.queueTimeout.
const DefaultQueueTimeout = 10 * time.Minute

// IsEnded reports whether a lease phase is final.
func IsEnded(p kobev1.LeasePhase) bool {
	return slices.Contains(EndedPhases, p)
}

// EndedPhases are the phases of a lease that has ended.
var EndedPhases = []kobev1.LeasePhase{kobev1.LeaseReleased, kobev1.LeaseExpired, kobev1.LeaseRecycling, kobev1.LeaseQuarantined}

// NotEnded selects, on the API server, the leases whose phase is not an
// ended one (the CRD's selectable field .status.phase): live lists of an
// owner's leases need not carry the ended ones kept for --lease-retention.
func NotEnded() fields.Selector {
	sel := make([]fields.Selector, 0, len(EndedPhases))
	for _, p := range EndedPhases {
		sel = append(sel, fields.OneTermNotEqualSelector(PhaseField, string(p)))
	}
	return fields.AndSelectors(sel...)
}

// PhaseField is the field selector's name of a lease's phase.
const PhaseField = "status.phase"

// IsActive reports whether l still counts against its requester: it is not
// being deleted and has not ended. A queued lease is active.
func IsActive(l *kobev1.ClusterLease) bool {
	return l.DeletionTimestamp == nil && !IsEnded(l.Status.Phase)
}

// CountActive counts the active leases in ls.
func CountActive(ls []kobev1.ClusterLease) int32 {
	var n int32
	for i := range ls {
		if IsActive(&ls[i]) {
			n++
		}
	}
	return n
}

// TTL is the lease's duration once bound: its own ttl, or the pool's.
func TTL(l *kobev1.ClusterLease, pool *kobev1.ClusterPool) time.Duration {
	if l.Spec.TTL != nil && l.Spec.TTL.Duration > 0 {
		return l.Spec.TTL.Duration
	}
	return PoolTTL(pool)
}

// PoolTTL is the pool's default lease duration (1h when unset).
func PoolTTL(pool *kobev1.ClusterPool) time.Duration {
	if pool != nil && pool.Spec.TTL != nil && pool.Spec.TTL.Duration > 0 {
		return pool.Spec.TTL.Duration
	}
	return time.Hour
}

// QueueTimeout is how long a lease may wait for a member of pool.
func QueueTimeout(pool *kobev1.ClusterPool) time.Duration {
	if pool != nil && pool.Spec.Scaling != nil && pool.Spec.Scaling.QueueTimeout != nil && pool.Spec.Scaling.QueueTimeout.Duration > 0 {
		return pool.Spec.Scaling.QueueTimeout.Duration
	}
	return DefaultQueueTimeout
}

// MaxExtensions is the lease's extension cap.
func MaxExtensions(l *kobev1.ClusterLease) int32 {
	if l.Spec.MaxExtensions != nil {
		return *l.Spec.MaxExtensions
	}
	return DefaultMaxExtensions
}

// Ending says whether a lease must end now, and why.
type Ending struct {
	// End is true when the lease must end now.
	End    bool
	Phase  kobev1.LeasePhase
	Reason string
	// Message is for humans.
	Message string
	// RecheckAfter is when to look again if the lease does not end now (0: no deadline).
	RecheckAfter time.Duration
}

// CheckEnd decides whether a Bound or queued lease ends at now: a bound lease
// at expiresAt, a queued one once it has waited the pool's queue timeout
// since it was queued (QueuedAt), either of them once its holder's
// heartbeats stopped (HeartbeatEndsAt), a bound one once it has been idle
// (IdleEndsAt).
func CheckEnd(l *kobev1.ClusterLease, queueTimeout time.Duration, now time.Time) Ending {
	e := checkTime(l, queueTimeout, now)
	if e.End || IsEnded(l.Status.Phase) {
		return e
	}
	for _, silence := range []struct {
		ends   time.Time
		ending func() Ending
	}{
		{HeartbeatEndsAt(l), func() Ending {
			timeout, _ := HeartbeatTimeout(l)
			return Ending{End: true, Phase: kobev1.LeaseExpired, Reason: kobev1.ReasonHeartbeatMissed,
				Message: fmt.Sprintf("no heartbeat from the lease's holder within its heartbeat timeout %s (the last recorded one moved the deadline to %s)",
					timeout, HeartbeatDeadline(l).UTC().Format(time.RFC3339))}
		}},
		{IdleEndsAt(l), func() Ending {
			timeout, _ := IdleTimeout(l)
			return Ending{End: true, Phase: kobev1.LeaseExpired, Reason: kobev1.ReasonIdle,
				Message: fmt.Sprintf("no request through the connect proxy within the lease's idle timeout %s (the last recorded one moved the deadline to %s)",
					timeout, IdleDeadline(l).UTC().Format(time.RFC3339))}
		}},
	} {
		if silence.ends.IsZero() {
			continue
		}
		left := silence.ends.Sub(now)
		if left <= 0 {
			return silence.ending()
		}
		if e.RecheckAfter <= 0 || left < e.RecheckAfter {
			e.RecheckAfter = left
		}
	}
	return e
}

// checkTime is CheckEnd's expiry and queue timeout.
func checkTime(l *kobev1.ClusterLease, queueTimeout time.Duration, now time.Time) Ending {
	switch {
	case IsEnded(l.Status.Phase):
		return Ending{}
	case l.Status.Phase == kobev1.LeaseBound:
		if l.Status.ExpiresAt == nil {
			return Ending{}
		}
		left := l.Status.ExpiresAt.Sub(now)
		if left <= 0 {
			return Ending{End: true, Phase: kobev1.LeaseExpired, Reason: kobev1.ReasonExpired,
				Message: fmt.Sprintf("lease reached its expiry %s", l.Status.ExpiresAt.UTC().Format(time.RFC3339))}
		}
		return Ending{RecheckAfter: left}
	default: // queued
		waited := now.Sub(QueuedAt(l))
		if waited >= queueTimeout {
			return Ending{End: true, Phase: kobev1.LeaseExpired, Reason: kobev1.ReasonQueueTimeout,
				Message: fmt.Sprintf("no member of pool %s became available within the queue timeout %s", l.Spec.Pool, queueTimeout)}
		}
		return Ending{RecheckAfter: queueTimeout - waited}
	}
}
