package lease

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// QueuedAtTolerance bounds how far the queued-at annotation may lie from the
// lease's creationTimestamp and still be believed. The HTTP API stamps it a
// moment before it creates the lease, so an honest stamp is within a second
// or two of creation; a stamp further off (clock skew, or a hand-written
// annotation meant to jump the queue or never time out) is ignored in favour
// of creationTimestamp, which the API server sets and nobody can change.
const QueuedAtTolerance = 5 * time.Second

// StampQueuedAt records now as the moment l was queued (annotation
// kobev1.AnnotationQueuedAt, RFC 3339 with nanoseconds, UTC). Call it once,
// just before the lease is created.
func StampQueuedAt(l *kobev1.ClusterLease, now time.Time) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[kobev1.AnnotationQueuedAt] = now.UTC().Format(time.RFC3339Nano)
}

// QueuedAt is when l was queued: its queued-at annotation when it parses and
// lies within QueuedAtTolerance of the creationTimestamp, else the
// creationTimestamp (one-second resolution; leases made with kubectl).
func QueuedAt(l *kobev1.ClusterLease) time.Time {
	created := l.CreationTimestamp.Time
	v, ok := l.Annotations[kobev1.AnnotationQueuedAt]
	if !ok {
		return created
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return created
	}
	// creationTimestamp is truncated to the second: an honest stamp lies in
	// [created-tolerance, created+1s+tolerance).
	if t.Before(created.Add(-QueuedAtTolerance)) || !t.Before(created.Add(time.Second+QueuedAtTolerance)) {
		return created
	}
	return t
}

// QueuedBefore reports whether a comes before b in their pool's queue:
// first queued (QueuedAt) first, ties by name, so that every replica
// computes the same order from the same objects.
func QueuedBefore(a, b *kobev1.ClusterLease) bool {
	return compareQueued(a, b) < 0
}

func compareQueued(a, b *kobev1.ClusterLease) int {
	if c := QueuedAt(a).Compare(QueuedAt(b)); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// IsQueued reports whether a lease waits in its pool's queue.
func IsQueued(l *kobev1.ClusterLease) bool {
	return l.DeletionTimestamp == nil && (l.Status.Phase == "" || l.Status.Phase == kobev1.LeasePending)
}

// SortQueue orders leases first come, first served: by QueuedAt, then name.
func SortQueue(ls []*kobev1.ClusterLease) {
	slices.SortStableFunc(ls, compareQueued)
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
// than waiting in the queue. It must exceed the fast path's claim budget
// (leaseservice.ClaimBudget, also counted from QueuedAt) with room for clock
// skew between replicas: the lease controller claims no member for a lease
// within it, so the two never claim two members for one lease.
const InFlightGrace = 5 * time.Second

// InFlight reports whether the HTTP API may still be binding l, and for how
// much longer.
func InFlight(l *kobev1.ClusterLease, now time.Time) (bool, time.Duration) {
	if l.Status.Phase != "" || l.Annotations[kobev1.AnnotationFastPath] != "true" {
		return false, 0
	}
	left := InFlightGrace - now.Sub(QueuedAt(l))
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
		if q.Name == l.Name && q.Namespace == l.Namespace {
			continue
		}
		if QueuedBefore(q, l) {
			pos++
		}
	}
	return pos
}

// MayBindNow reports whether a new request at position in its pool's queue
// may be bound at once when available members are Ready and unclaimed: when
// nobody waits ahead of it, or when the members outnumber those ahead, so
// that binding it takes no member any of them would get. Without the second
// rule one queued lease made every later request queue behind it until the
// lease controller caught up, although members were Ready (make bench).
func MayBindNow(position int32, available int) bool {
	return position <= 1 || int64(available) >= int64(position)
}

// PositionEvery is the least time between two writes of a queued lease's
// status when only its position moved (issue 27: one status write per
// transition, never one per observation). Every hand-out ahead of a lease
// moves it, so writing each move cost a write per lease ahead; the HTTP API
// computes every caller's position afresh, and the status copy, which
// people read with kubectl, lags by at most this much.
const PositionEvery = 5 * time.Second

// QueuedCondition is the Bound condition of a lease waiting at pos in its
// pool's queue.
func QueuedCondition(l *kobev1.ClusterLease, pos int32) metav1.Condition {
	return metav1.Condition{
		Type: kobev1.ConditionBound, Status: metav1.ConditionFalse, Reason: kobev1.ReasonQueued,
		Message:            fmt.Sprintf("waiting for a ready member of pool %s (position %d)", l.Spec.Pool, pos),
		ObservedGeneration: l.Generation,
	}
}

// MarkQueued records in memory that l waits at pos in its pool's queue:
// phase Pending, queuePosition and QueuedCondition (its transition time now
// when the condition's status changes). The HTTP API's Pending answer and
// the lease controller mark a lease the same way, so that the controller's
// first look finds nothing new to write.
func MarkQueued(l *kobev1.ClusterLease, pos int32, now time.Time) {
	l.Status.Phase = kobev1.LeasePending
	l.Status.QueuePosition = pos
	c := QueuedCondition(l, pos)
	c.LastTransitionTime = metav1.NewTime(now.UTC())
	meta.SetStatusCondition(&l.Status.Conditions, c)
}

// HoldPosition decides whether recording pos for l may wait: 0 means write
// it now, otherwise how long until it may be written. It may wait only when
// the position is all that changed (l is already Pending and its Bound
// condition says Queued) and the last write was under PositionEvery ago:
// lastWrite, this process's own last write of it (zero: none), or else the
// time the condition last changed, which its first mark set.
func HoldPosition(l *kobev1.ClusterLease, pos int32, lastWrite, now time.Time) time.Duration {
	c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionBound)
	if l.Status.Phase != kobev1.LeasePending || c == nil || c.Status != metav1.ConditionFalse || c.Reason != kobev1.ReasonQueued ||
		c.ObservedGeneration != l.Generation || l.Status.QueuePosition == pos {
		return 0
	}
	if lastWrite.IsZero() {
		lastWrite = c.LastTransitionTime.Time
	}
	return max(lastWrite.Add(PositionEvery).Sub(now), 0)
}
