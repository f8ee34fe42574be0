package clusterpool

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// setStatus writes the plan's counters, phase and conditions into the pool,
// and tells condition changes as events. status.failures is not touched: the
// instance controller owns it.
func (r *Reconciler) setStatus(p *kobev1.ClusterPool, plan pool.Plan, queue int32) {
	st := &p.Status
	st.ObservedGeneration = p.Generation
	st.Phase = plan.Phase
	c := plan.Counters
	st.Ready, st.Leased, st.Creating, st.Recycling = c.Ready, c.Leased, c.Creating, c.Recycling
	st.Unhealthy, st.Quarantined, st.QueueDepth = c.Unhealthy, c.Quarantined, queue
	st.NextOrdinal = max(st.NextOrdinal, plan.NextOrdinal)
	st.TemplateHash = pool.TemplateHash(&p.Spec)
	now := metav1.NewTime(r.Clock.Now())
	for _, cond := range plan.Conditions {
		old := meta.FindStatusCondition(st.Conditions, cond.Type)
		cond.ObservedGeneration, cond.LastTransitionTime = p.Generation, now
		meta.SetStatusCondition(&st.Conditions, cond)
		if cond.Type == kobev1.ConditionReady || (old != nil && old.Reason == cond.Reason) {
			continue
		}
		kind := corev1.EventTypeNormal
		if cond.Status == metav1.ConditionFalse && cond.Type != kobev1.ConditionNotImplemented {
			kind = corev1.EventTypeWarning
		}
		if cond.Type == kobev1.ConditionWarm && cond.Reason == kobev1.ReasonFilling {
			kind = corev1.EventTypeNormal
		}
		r.event(p, nil, kind, cond.Reason, cond.Type, "%s", cond.Message)
	}
}

// patchStatus sends only what changed (a JSON merge patch computed from
// before), so status.failures, incremented concurrently by the instance
// controller, is never overwritten.
func (r *Reconciler) patchStatus(ctx context.Context, before, p *kobev1.ClusterPool) error {
	st := p.Status
	metrics.SetPool(p.Namespace, p.Name, metrics.PoolCounters{
		Ready: st.Ready, Leased: st.Leased, Creating: st.Creating, Recycling: st.Recycling,
		Unhealthy: st.Unhealthy, Quarantined: st.Quarantined, QueueDepth: st.QueueDepth, Failures: st.Failures,
	})
	if equality.Semantic.DeepEqual(before.Status, p.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patching status of pool %s: %w", p.Name, err)
	}
	return nil
}
