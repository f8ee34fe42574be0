package lease

import (
	"errors"
	"fmt"
	"sort"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// DefaultMaxExtensions applies when neither the lease nor its policy sets one.
const DefaultMaxExtensions int32 = 2

// DefaultQueueTimeout ends a lease that waited this long for a member when its
// pool sets no scaling.queueTimeout.
const DefaultQueueTimeout = 10 * time.Minute

// IsEnded reports whether a lease phase is final.
func IsEnded(p kobev1.LeasePhase) bool {
	switch p {
	case kobev1.LeaseReleased, kobev1.LeaseExpired, kobev1.LeaseRecycling, kobev1.LeaseQuarantined:
		return true
	}
	return false
}

// IsQueued reports whether a lease waits in its pool's queue.
func IsQueued(l *kobev1.ClusterLease) bool {
	return l.DeletionTimestamp == nil && (l.Status.Phase == "" || l.Status.Phase == kobev1.LeasePending)
}

// SortQueue orders leases first come, first served: by creation time, then
// name, so that every replica computes the same order.
func SortQueue(ls []*kobev1.ClusterLease) {
	sort.SliceStable(ls, func(i, j int) bool {
		ti, tj := ls[i].CreationTimestamp.Time, ls[j].CreationTimestamp.Time
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return ls[i].Name < ls[j].Name
	})
}

// Queue returns the queued leases of a pool in order.
func Queue(all []kobev1.ClusterLease, pool string) []*kobev1.ClusterLease {
	var q []*kobev1.ClusterLease
	for i := range all {
		if all[i].Spec.Pool == pool && IsQueued(&all[i]) {
			q = append(q, &all[i])
		}
	}
	SortQueue(q)
	return q
}

// InFlightGrace is how long a lease the HTTP API is binding on the request
// path (AnnotationFastPath, no phase yet) is presumed to be in flight rather
// than waiting in the queue.
const InFlightGrace = 5 * time.Second

// InFlight reports whether the HTTP API may still be binding l, and for how
// much longer.
func InFlight(l *kobev1.ClusterLease, now time.Time) (bool, time.Duration) {
	if l.Status.Phase != "" || l.Annotations[kobev1.AnnotationFastPath] != "true" {
		return false, 0
	}
	left := InFlightGrace - now.Sub(l.CreationTimestamp.Time)
	return left > 0, left
}

// Waiting keeps the leases of a queue that are really waiting, leaving out
// those still on the HTTP API's fast path: a request on the fast path must
// not queue behind other requests that are themselves being bound.
func Waiting(queue []*kobev1.ClusterLease, now time.Time) []*kobev1.ClusterLease {
	out := make([]*kobev1.ClusterLease, 0, len(queue))
	for _, l := range queue {
		if inFlight, _ := InFlight(l, now); !inFlight {
			out = append(out, l)
		}
	}
	return out
}

// Position is the 1-based place of l in its pool's queue. l need not be in
// the list (a cache may not have seen it yet): then it counts the queued
// leases that come before it.
func Position(queue []*kobev1.ClusterLease, l *kobev1.ClusterLease) int32 {
	pos := int32(1)
	for _, q := range queue {
		if q.UID == l.UID || q.Name == l.Name {
			continue
		}
		if q.CreationTimestamp.Time.Before(l.CreationTimestamp.Time) ||
			(q.CreationTimestamp.Time.Equal(l.CreationTimestamp.Time) && q.Name < l.Name) {
			pos++
		}
	}
	return pos
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
// at expiresAt, a queued one after the pool's queue timeout.
func CheckEnd(l *kobev1.ClusterLease, queueTimeout time.Duration, now time.Time) Ending {
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
		waited := now.Sub(l.CreationTimestamp.Time)
		if waited >= queueTimeout {
			return Ending{End: true, Phase: kobev1.LeaseExpired, Reason: kobev1.ReasonQueueTimeout,
				Message: fmt.Sprintf("no member of pool %s became available within the queue timeout %s", l.Spec.Pool, queueTimeout)}
		}
		return Ending{RecheckAfter: queueTimeout - waited}
	}
}

// ErrExtensionLimit is returned when a lease has used all its extensions.
var ErrExtensionLimit = errors.New("extension limit reached")

// ErrNotBound is returned when extending a lease that holds no member.
var ErrNotBound = errors.New("lease is not bound")

// Extend computes the expiry after one more extension of by, or refuses.
func Extend(l *kobev1.ClusterLease, by time.Duration, now time.Time) (time.Time, error) {
	if l.Status.Phase != kobev1.LeaseBound || l.Status.ExpiresAt == nil {
		return time.Time{}, fmt.Errorf("%w (phase %s)", ErrNotBound, phaseOrPending(l.Status.Phase))
	}
	if by <= 0 {
		return time.Time{}, fmt.Errorf("extension must be positive, got %s", by)
	}
	if max := MaxExtensions(l); l.Status.Extensions >= max {
		return time.Time{}, fmt.Errorf("%w: lease %s was extended %d of %d allowed times", ErrExtensionLimit, l.Name, l.Status.Extensions, max)
	}
	base := l.Status.ExpiresAt.Time
	if base.Before(now) {
		base = now
	}
	return base.Add(by), nil
}

func phaseOrPending(p kobev1.LeasePhase) kobev1.LeasePhase {
	if p == "" {
		return kobev1.LeasePending
	}
	return p
}
