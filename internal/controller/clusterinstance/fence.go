package clusterinstance

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// fence stops a bound member's API server (backend.Fencer) before anything
// slower of its teardown: the lease's certificate and every token minted
// inside the member are only accepted there. The Fenced condition records
// it; until it is True every teardown step fences first, so an operator
// that takes over a half-recycled member does so before anything else.
// A member never bound had no holder and is not fenced. A failed fence
// holds nothing up: Delete cuts access too, only later; the condition says
// why, and the next pass fences again.
func (r *Reconciler) fence(ctx context.Context, s *scope) {
	f, ok := s.backend.(backend.Fencer)
	key := client.ObjectKeyFromObject(s.inst)
	if !ok || !needsFence(s.inst) {
		return
	}
	if r.fenced.Has(key, s.inst.UID) {
		r.markFenced(s)
		return
	}
	if c, _ := backend.CheckHost(s.inst, s.backend); c == backend.HostElsewhere {
		return // never passed to the backend of another host
	}
	if err := f.Fence(ctx, s.member()); err != nil {
		r.mark(s, kobev1.ConditionFenced, metav1.ConditionFalse, kobev1.ReasonFenceFailed,
			"stopping the member's API server failed; its destruction cuts its lease's access instead: "+err.Error(), corev1.EventTypeWarning)
		return
	}
	// A lease's routine end deletes the member without writing the
	// condition (recycle): this replica remembers the fence instead, and
	// another one fences once more (Fence is idempotent).
	r.fenced.Add(key, s.inst.UID)
	r.markFenced(s)
}

// markFenced sets the Fenced condition (in memory; the reconcile's status
// write records it).
func (r *Reconciler) markFenced(s *scope) {
	r.setCondition(s, kobev1.ConditionFenced, metav1.ConditionTrue, kobev1.ReasonFenced,
		"the member's API server is stopped: no credential of lease "+s.inst.Spec.LeaseRef.Name+" works")
}

// needsFence reports whether inst was bound to a lease and is not known to
// be fenced.
func needsFence(inst *kobev1.ClusterInstance) bool {
	return inst.Spec.LeaseRef != nil && !meta.IsStatusConditionTrue(inst.Status.Conditions, kobev1.ConditionFenced)
}
