package clusterpool

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/metrics"
)

// setStatus writes the plan's counters, phase and conditions into the pool,
// and tells condition reason changes as events (Ready, the summary, tells
// none). The failure streak (status.failures, creatingTimeouts,
// lastFailure, countedFailures) is already counted by decide.
func (r *Reconciler) setStatus(_ context.Context, s *scope) error {
	st, plan := &s.pool.Status, s.plan
	st.Phase = plan.Phase
	c := plan.StatusCounters()
	st.Ready, st.Leased, st.Creating, st.Recycling = c.Ready, c.Leased, c.Creating, c.Recycling
	st.Unhealthy, st.Quarantined, st.QueueDepth = c.Unhealthy, c.Quarantined, s.queue
	st.NextOrdinal = max(st.NextOrdinal, plan.NextOrdinal)
	st.Outdated = plan.Outdated
	setTemplate(st, plan.TemplateHash)
	st.MemberLimits = plan.MemberLimits.DeepCopy()
	if plan.Pressure {
		// In the API, not in memory: a restarted operator still waits
		// scaleDownAfter from here before it shrinks the pool.
		st.LastPressure = ptr.To(metav1.NewTime(s.conds.Now.Truncate(time.Second)))
	}
	for _, cond := range plan.Conditions {
		if cond.Type == kobev1.ConditionReady {
			s.conds.Set(s.pool, cond)
			continue
		}
		if eventType(cond) == corev1.EventTypeWarning {
			s.conds.Mark(s.pool, corev1.EventTypeWarning, cond)
		} else {
			// Routine (filling up, ready again): the condition says it,
			// without an Event per refill.
			s.conds.Set(s.pool, cond)
		}
	}
	// Only scaling pools with a demand measurement report DemandCovered,
	// only judged kubernetes backend pools NetworkPolicyEnforced, only
	// pools of backends that run members on a host MemberLimits.
	for _, t := range []string{kobev1.ConditionDemandCovered, kobev1.ConditionNetworkPolicyEnforced, kobev1.ConditionMemberLimits} {
		if meta.FindStatusCondition(plan.Conditions, t) == nil {
			meta.RemoveStatusCondition(&st.Conditions, t)
		}
	}
	return nil
}

// setTemplate records the template new members are built from; the
// revision goes up by one each time it changes (1 the first time it is
// recorded, also for a pool recorded before revisions were).
func setTemplate(st *kobev1.ClusterPoolStatus, hash string) {
	switch {
	case st.TemplateRevision == 0:
		st.TemplateRevision = 1
	case st.TemplateHash != hash:
		st.TemplateRevision++
	}
	st.TemplateHash = hash
}

// eventType is Warning for a condition that went False, except the ones
// that are expected on the way: filling up, and fields not acted on.
func eventType(c metav1.Condition) string {
	switch {
	case c.Status != metav1.ConditionFalse, c.Type == kobev1.ConditionNotImplemented,
		c.Type == kobev1.ConditionWarm && c.Reason == kobev1.ReasonFilling:
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}

// publishMetrics exports the pool's counters as they stand after the
// reconcile.
func publishMetrics(p *kobev1.ClusterPool) {
	st := p.Status
	metrics.SetPool(p.Namespace, p.Name, metrics.PoolCounters{
		Ready: st.Ready, Leased: st.Leased, Creating: st.Creating, Recycling: st.Recycling,
		Unhealthy: st.Unhealthy, Quarantined: st.Quarantined, QueueDepth: st.QueueDepth, Failures: st.Failures,
	})
}
