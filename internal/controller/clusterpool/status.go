package clusterpool

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// setStatus writes the plan's counters, phase and conditions into the pool,
// and tells condition reason changes as events (Ready, the summary, tells
// none). status.failures is not touched: the instance controller owns it.
func (r *Reconciler) setStatus(_ context.Context, s *scope) error {
	st, plan := &s.pool.Status, s.plan
	st.Phase = plan.Phase
	c := plan.Counters
	st.Ready, st.Leased, st.Creating, st.Recycling = c.Ready, c.Leased, c.Creating, c.Recycling
	st.Unhealthy, st.Quarantined, st.QueueDepth = c.Unhealthy, c.Quarantined, s.queue
	st.NextOrdinal = max(st.NextOrdinal, plan.NextOrdinal)
	st.TemplateHash = pool.TemplateHash(&s.pool.Spec)
	for _, cond := range plan.Conditions {
		if cond.Type == kobev1.ConditionReady {
			s.conds.Set(s.pool, cond)
			continue
		}
		s.conds.Mark(s.pool, eventType(cond), cond)
	}
	return nil
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
