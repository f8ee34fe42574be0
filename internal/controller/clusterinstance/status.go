package clusterinstance

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// setPhase moves the instance to phase, records when, and sets its Ready
// condition. An Event tells only of what a person acts on: a member
// recycled for a failure, or quarantined. Routine progress (Creating,
// Ready, Leased, recycled after its lease) is in the phase, the conditions
// and the log: each Event is a write on the host's API server, and a
// hand-out would otherwise pay for several (docs/benchmarks.md).
func (r *Reconciler) setPhase(s *scope, phase kobev1.InstancePhase, reason, msg string) {
	st := &s.inst.Status
	ready := metav1.ConditionFalse
	if phase == kobev1.InstanceReady {
		ready = metav1.ConditionTrue
	}
	r.setCondition(s, kobev1.ConditionReady, ready, reason, msg)
	if st.Phase == phase {
		return
	}
	s.log.Info("Phase changed", "from", st.Phase, "to", phase, "reason", reason)
	st.Phase = phase
	t := metav1.NewTime(s.now)
	st.LastPhaseChange = &t
	if actionable(phase, reason) {
		r.event(s, corev1.EventTypeWarning, reason, string(phase), msg)
	}
}

// setCondition sets a condition; it reports whether its status or reason changed.
func (r *Reconciler) setCondition(s *scope, t string, status metav1.ConditionStatus, reason, msg string) bool {
	return s.conds.Set(s.inst, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg})
}

// mark sets a condition and, when its reason changed, records an event of
// kind with the condition's reason.
func (r *Reconciler) mark(s *scope, t string, status metav1.ConditionStatus, reason, msg, kind string) {
	s.conds.Mark(s.inst, kind, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg})
}

func (r *Reconciler) event(s *scope, kind, reason, action, msg string) {
	s.conds.Event(s.inst, kind, reason, action, msg)
}

// actionable reports whether a move to phase for reason is something a
// person acts on, and so worth an Event: quarantine, and recycling for any
// reason but the routine ones (the lease ended, the pool shrank or went).
func actionable(phase kobev1.InstancePhase, reason string) bool {
	switch phase {
	case kobev1.InstanceQuarantined:
		return true
	case kobev1.InstanceRecycling:
		return reason != kobev1.ReasonLeaseEnded && reason != kobev1.ReasonScaledDown && reason != kobev1.ReasonPoolDeleted
	}
	return false
}
