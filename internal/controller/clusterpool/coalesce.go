package clusterpool

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// statusMinInterval is the least time between two status writes of one
// pool whose counts change under churn (issue 27: at most one a second per
// pool). Every hand-out and every replacement changes a count; writing each
// change costs the host's API server a write, and a burst of leases would
// pay several per lease.
const statusMinInterval = time.Second

// holdStatus decides whether a pool's new status may wait: 0 means write it
// now, otherwise how long until it may be written. It may wait when the
// last write was under statusMinInterval ago and nothing changed that a
// person or another controller needs at once: the observed generation (a
// spec change shows within the interval anyway), the template, ordinals,
// failure counts (members wait for them), the pressure that times
// scale-down, and any condition going to a Warning (eventType). Counts,
// phase, demand history and routine conditions (filling up, ready again)
// wait: the next reconcile derives them again from the members and leases.
func holdStatus(before, after *kobev1.ClusterPoolStatus, lastWrite, now time.Time) time.Duration {
	left := lastWrite.Add(statusMinInterval).Sub(now)
	if lastWrite.IsZero() || left <= 0 {
		return 0
	}
	urgent := before.ObservedGeneration != after.ObservedGeneration ||
		before.NextOrdinal != after.NextOrdinal || before.TemplateHash != after.TemplateHash ||
		before.TemplateRevision != after.TemplateRevision || before.Failures != after.Failures ||
		before.CreatingTimeouts != after.CreatingTimeouts ||
		!equality.Semantic.DeepEqual(before.LastFailure, after.LastFailure) ||
		!equality.Semantic.DeepEqual(before.CountedFailures, after.CountedFailures) ||
		!equality.Semantic.DeepEqual(before.LastPressure, after.LastPressure)
	if urgent {
		return 0
	}
	for _, c := range after.Conditions {
		old := meta.FindStatusCondition(before.Conditions, c.Type)
		changed := old == nil || old.Status != c.Status || old.Reason != c.Reason
		if changed && eventType(c) != corev1.EventTypeNormal {
			return 0
		}
	}
	return left
}

// coalesceStatus holds back a status change that may wait (holdStatus):
// the status goes back to what the API holds, so the deferred write writes
// nothing, and the pool is reconciled again when the change may be written.
// A change written now is recorded.
func (r *Reconciler) coalesceStatus(s *scope, res ctrl.Result) ctrl.Result {
	base, ok := s.patch.Base().(*kobev1.ClusterPool)
	if !ok || equality.Semantic.DeepEqual(base.Status, s.pool.Status) {
		return res
	}
	wait := holdStatus(&base.Status, &s.pool.Status, r.statusWrites.At(s.pool.UID), s.conds.Now)
	if wait <= 0 {
		r.statusWrites.Wrote(s.pool.UID, s.conds.Now)
		return res
	}
	s.pool.Status = *base.Status.DeepCopy()
	if res.RequeueAfter <= 0 || wait < res.RequeueAfter {
		res.RequeueAfter = wait
	}
	return res
}
