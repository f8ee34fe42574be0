package clusterinstance

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// finalize destroys a deleted member: Recycling until the backend reports
// nothing of it is left, then the finalizer (its access material, sealed in
// its status, goes with the object; a legacy access Secret is deleted: no
// garbage collector is assumed). A bound member not yet fenced is fenced
// first. A member bound with cleanupMode VerifiedDestroy must prove it
// instead (finalizeVerified).
func (r *Reconciler) finalize(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(s.inst, kobev1.FinalizerInstance) {
		return ctrl.Result{}, nil
	}
	if s.inst.Status.Phase != kobev1.InstanceRecycling && s.inst.Status.Phase != kobev1.InstanceQuarantined {
		reason, msg := kobev1.ReasonScaledDown, "the member was deleted"
		switch {
		case s.inst.Spec.LeaseRef != nil:
			reason, msg = kobev1.ReasonLeaseEnded, "the member was deleted while bound to lease "+s.inst.Spec.LeaseRef.Name
		case s.pool == nil || !s.pool.DeletionTimestamp.IsZero():
			reason, msg = kobev1.ReasonPoolDeleted, "the member's pool is being deleted"
		}
		r.setPhase(s, kobev1.InstanceRecycling, reason, msg)
	}
	if s.backend == nil {
		r.mark(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonBackendUnavailable,
			fmt.Sprintf("cannot destroy the member: backend %q is not wired in this operator", s.inst.Spec.Backend.Type), corev1.EventTypeWarning)
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	// Never report destroyed what this host did not destroy.
	refused, err := r.guardHost(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refused != "" {
		return ctrl.Result{RequeueAfter: elsewhereRecheck}, nil
	}
	r.fence(ctx, s)
	if err := r.deleteJobs(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if verifiedTeardown(s.inst) {
		return r.finalizeVerified(ctx, s)
	}
	gone, err := s.backend.Delete(ctx, s.member())
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("destroying member %s: %w", s.inst.Name, err)
	}
	if !gone {
		return ctrl.Result{RequeueAfter: r.pollInterval()}, nil
	}
	if s.inst.Status.AccessSecretRef != nil {
		// A member built by an older operator, never moved: its Secret.
		// Everything else goes with the object.
		if err := r.deleteLegacySecret(ctx, s.inst); err != nil {
			return ctrl.Result{}, err
		}
	}
	if wait := countWait(s); wait > 0 {
		// The pool's watch wakes this member when the count lands.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	s.log.Info("Destroyed: the backend reports nothing of the member is left")
	// The object goes with its finalizer: a last status write would be
	// read by no one. A teardown that took longer showed Recycling while
	// it ran (the reconciles that waited for the backend wrote it).
	s.patch.KeepStatus()
	if err := s.patch.RemoveFinalizer(ctx, kobev1.FinalizerInstance); err != nil {
		return ctrl.Result{}, err
	}
	if s.patch.Gone() {
		r.finalized.Add(client.ObjectKeyFromObject(s.inst), s.inst.UID)
	}
	return ctrl.Result{}, nil
}

// countWaitMax bounds how long a destroyed member that failed to become
// Ready waits for its pool to count it: a pool controller that is down
// must not keep members forever.
const countWaitMax = 2 * time.Minute

// countWait is how long the finalizer still waits before it goes: a member
// that failed to become Ready stays until its pool's status names it in
// countedFailures (pool.CountFailures), so that no failure is lost from the
// streak that paces the pool's creates. 0: it need not wait (no failure, its
// pool gone or being deleted, already counted, or waited countWaitMax).
func countWait(s *scope) time.Duration {
	if _, _, failed := pool.Failed(s.inst); !failed || s.pool == nil || !s.pool.DeletionTimestamp.IsZero() ||
		slices.Contains(s.pool.Status.CountedFailures, s.inst.Name) {
		return 0
	}
	left := countWaitMax - s.now.Sub(s.inst.Status.LastPhaseChange.Time)
	if left <= 0 {
		s.log.Info("Pool did not count the member's failure in time; destroying it uncounted", "pool", s.pool.Name, "waited", countWaitMax)
		return 0
	}
	return min(left, countPoll)
}

// countPoll is how often a member waiting for its count looks again if no
// pool event wakes it first.
const countPoll = 5 * time.Second
