package clusterinstance

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/metrics"
)

// setPhase moves the instance to phase, records when, sets its Ready
// condition, and tells the story in an event.
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
	if phase == kobev1.InstanceCreating && reason == kobev1.ReasonCreating {
		// The pool's MemberCreated Event already says it.
		return
	}
	kind := corev1.EventTypeNormal
	if phase == kobev1.InstanceRecycling && reason != kobev1.ReasonLeaseEnded && reason != kobev1.ReasonScaledDown && reason != kobev1.ReasonPoolDeleted {
		kind = corev1.EventTypeWarning
	}
	r.event(s, kind, reason, string(phase), msg)
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

// countFailure adds one to the pool's failure streak (status.failures, and
// status.creatingTimeouts when creatingTimeout reaped the member) and records
// the member as status.lastFailure, which the pool's create backoff and
// conditions read. The read-modify-write is fenced by the pool's
// resourceVersion and retried on conflict. It precedes the member's move to
// Recycling; a member the pool already names as its last failure (its move
// failed after the count, and this is the retry) is not counted again.
func (r *Reconciler) countFailure(ctx context.Context, s *scope, reason, msg string) error {
	key := types.NamespacedName{Namespace: s.inst.Namespace, Name: s.inst.Spec.PoolRef.Name}
	counted := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pool := &kobev1.ClusterPool{}
		if err := r.APIReader.Get(ctx, key, pool); err != nil {
			return err
		}
		if s.inst.Spec.PoolRef.UID != "" && pool.UID != s.inst.Spec.PoolRef.UID {
			return nil
		}
		if lf := pool.Status.LastFailure; lf != nil && lf.Member == s.inst.Name {
			return nil
		}
		before := pool.DeepCopy()
		recordFailure(&pool.Status, s.inst, reason, msg, s.now)
		if err := r.Client.Status().Patch(ctx, pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		counted = true
		return nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("counting the failure of %s on pool %s: %w", s.inst.Name, key.Name, err)
	}
	if counted {
		metrics.MemberFailure(key.Namespace, key.Name, reason)
	}
	return nil
}

// recordFailure adds member inst's failure to a pool's status.
func recordFailure(st *kobev1.ClusterPoolStatus, inst *kobev1.ClusterInstance, reason, msg string, now time.Time) {
	st.Failures++
	if reason == kobev1.ReasonCreatingTimeout {
		st.CreatingTimeouts++
	}
	st.LastFailure = &kobev1.MemberFailure{
		Member: inst.Name, Reason: reason, Message: truncateUTF8(msg, maxFailureMessage),
		Time: metav1.NewTime(now), TemplateHash: inst.Spec.TemplateHash,
	}
}

// maxFailureMessage is status.lastFailure.message's bound in the CRD.
const maxFailureMessage = 1024

// truncateUTF8 cuts s to at most n bytes of valid UTF-8: a rune cut in two,
// or any invalid byte, is dropped rather than sent to the API server.
func truncateUTF8(s string, n int) string {
	return strings.ToValidUTF8(s[:min(len(s), n)], "")
}

// resetFailures ends the pool's failure streak because a member became
// Ready: failures and creatingTimeouts go back to 0 (lastFailure stays, as
// history). Fenced and retried on conflict like countFailure; the caller
// calls it only when the cached pool shows a streak.
func (r *Reconciler) resetFailures(ctx context.Context, s *scope) error {
	key := client.ObjectKeyFromObject(s.pool)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pool := &kobev1.ClusterPool{}
		if err := r.APIReader.Get(ctx, key, pool); err != nil {
			return err
		}
		if pool.UID != s.pool.UID || (pool.Status.Failures == 0 && pool.Status.CreatingTimeouts == 0) {
			return nil
		}
		before := pool.DeepCopy()
		pool.Status.Failures = 0
		pool.Status.CreatingTimeouts = 0
		return r.Client.Status().Patch(ctx, pool, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("resetting the failures of pool %s after %s became Ready: %w", key.Name, s.inst.Name, err)
	}
	return nil
}
