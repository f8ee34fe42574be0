package clusterinstance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/gates"
)

// reconcileCreating builds the member, seals its access material into its
// status once the backend reports it Ready, then runs its readiness gates. A member that
// fails, or is still Creating after creatingTimeout, is recycled with a
// failure reason, which the pool counts.
func (r *Reconciler) reconcileCreating(ctx context.Context, s *scope) (ctrl.Result, error) {
	left := creatingLeft(s.inst, s.settings.creatingTimeout, s.now)
	if left <= 0 {
		reason, msg := timeoutVerdict(s.inst, s.settings.creatingTimeout)
		return r.recycle(ctx, s, reason, msg)
	}
	if !meta.IsStatusConditionTrue(s.inst.Status.Conditions, kobev1.ConditionProvisioned) {
		if err := s.backend.Create(ctx, s.member()); err != nil {
			switch {
			case errors.Is(err, backend.ErrUnavailable):
				// The workqueue's exponential backoff paces the retries.
				r.mark(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonBackendUnavailable, err.Error(), corev1.EventTypeWarning)
			case errors.Is(err, backend.ErrInvalidSpec):
				// Only a change to the pool helps: the member and, through
				// it, the pool's Capacity condition say what to fix.
				r.mark(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonProvisionFailed, err.Error(), corev1.EventTypeWarning)
			}
			return ctrl.Result{}, fmt.Errorf("creating member %s: %w", s.inst.Name, err)
		}
	}
	obs, err := s.backend.Observe(ctx, s.member())
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("observing member %s: %w", s.inst.Name, err)
	}
	switch obs.State {
	case backend.StateFailed:
		r.setCondition(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonProvisionFailed, obs.Message)
		return r.recycle(ctx, s, kobev1.ReasonProvisionFailed, "the backend reports the member failed: "+obs.Message)
	case backend.StateReady:
		if err := r.publishAccess(ctx, s, obs.Access); err != nil {
			return ctrl.Result{}, err
		}
	default:
		msg := obs.Message
		if msg == "" {
			msg = "the backend is building the member (" + string(obs.State) + ")"
		}
		r.setCondition(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonCreating, msg)
		return ctrl.Result{RequeueAfter: min(r.pollInterval(), left)}, nil
	}
	if res, done, err := r.applyBootstraps(ctx, s, left); !done || err != nil {
		return res, err
	}
	return r.runGates(ctx, s, left)
}

// runGates evaluates the readiness gates; built-in ones become conditions on
// the instance. All passed makes the member Ready.
func (r *Reconciler) runGates(ctx context.Context, s *scope, left time.Duration) (ctrl.Result, error) {
	results, err := r.evaluateGates(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	var pending []string
	for _, g := range results {
		if !g.Passed {
			pending = append(pending, g.Name)
		}
		if !g.Builtin || g.Name == kobev1.ConditionBootstrapsComplete {
			continue // the condition is the gate; someone else (or applyBootstraps) sets it
		}
		if g.Passed {
			// No Event per gate: the move to Ready names every gate passed
			// in one, and each Event is a write the API server pays for
			// (three per member at benchmark rates, make bench).
			r.setCondition(s, g.Name, metav1.ConditionTrue, kobev1.ReasonGatePassed, g.Message)
		} else {
			r.setCondition(s, g.Name, metav1.ConditionFalse, kobev1.ReasonGatePending, g.Message)
		}
	}
	if len(pending) > 0 {
		r.setCondition(s, kobev1.ConditionReady, metav1.ConditionFalse, kobev1.ReasonGatePending,
			"waiting for readiness gates: "+strings.Join(pending, ", "))
		return ctrl.Result{RequeueAfter: min(r.pollInterval(), left)}, nil
	}
	s.inst.Status.HealthFailures = 0
	t := metav1.NewTime(s.now)
	s.inst.Status.LastHealthCheck = &t
	r.setCondition(s, kobev1.ConditionHealthy, metav1.ConditionTrue, kobev1.ReasonProbeSucceeded, "the readiness gates passed")
	if s.inst.Status.TimeToReady == nil {
		// The pool's demand measurement reads it; creationTimestamp has
		// second precision, so milliseconds are plenty.
		s.inst.Status.TimeToReady = &metav1.Duration{Duration: s.now.Sub(s.inst.CreationTimestamp.Time).Round(time.Millisecond)}
	}
	r.setPhase(s, kobev1.InstanceReady, kobev1.ReasonGatePassed,
		fmt.Sprintf("all %d readiness gates passed: %s", len(results), strings.Join(kobev1.GateKeys(s.settings.gates), ", ")))
	return ctrl.Result{RequeueAfter: s.settings.interval}, nil
}

// reconcileReady probes a warm member every health interval; failureThreshold
// consecutive failures recycle it without it ever being offered again.
func (r *Reconciler) reconcileReady(ctx context.Context, s *scope) (ctrl.Result, error) {
	if why := r.accessUnreadable(s); why != "" {
		return r.recycle(ctx, s, kobev1.ReasonAccessUnreadable, why)
	}
	if s.simulated() {
		return ctrl.Result{}, nil // nothing to probe; see simulated.go
	}
	if res, handled, err := r.reconcileFreeze(ctx, s); handled {
		return res, err
	}
	if due := healthDue(s.inst, s.settings.interval, s.now); due > 0 {
		return ctrl.Result{RequeueAfter: due}, nil
	}
	probeErr := r.probe(ctx, s)
	failures, recycle := healthVerdict(s.inst.Status.HealthFailures, probeErr, s.settings.threshold)
	st := &s.inst.Status
	st.HealthFailures = failures
	t := metav1.NewTime(s.now)
	st.LastHealthCheck = &t
	if probeErr == nil {
		r.setCondition(s, kobev1.ConditionHealthy, metav1.ConditionTrue, kobev1.ReasonProbeSucceeded, "GET /readyz succeeded")
		return ctrl.Result{RequeueAfter: s.settings.interval}, nil
	}
	msg := fmt.Sprintf("probe failed %d of %d times in a row: %v", failures, s.settings.threshold, probeErr)
	r.setCondition(s, kobev1.ConditionHealthy, metav1.ConditionFalse, kobev1.ReasonProbeFailed, msg)
	r.event(s, corev1.EventTypeWarning, kobev1.ReasonProbeFailed, "Probe", msg)
	if recycle {
		return r.recycle(ctx, s, kobev1.ReasonUnhealthy, msg)
	}
	return ctrl.Result{RequeueAfter: s.settings.interval}, nil
}

// probe is the health probe: the backend still reports the member Ready and
// its API server answers /readyz.
func (r *Reconciler) probe(ctx context.Context, s *scope) error {
	obs, err := s.backend.Observe(ctx, s.member())
	if err != nil {
		return fmt.Errorf("observing: %w", err)
	}
	if obs.State != backend.StateReady {
		return fmt.Errorf("backend reports %s: %s", obs.State, obs.Message)
	}
	kubeconfig, err := r.adminKubeconfig(ctx, s)
	if err != nil {
		return err
	}
	return gates.Probe(ctx, kubeconfig, r.probeTimeout(s))
}

// reconcileLeased keeps a bound member Leased while its lease holds it, and
// recycles it once the lease ended, is going or gone, or its status names
// another member.
func (r *Reconciler) reconcileLeased(ctx context.Context, s *scope) (ctrl.Result, error) {
	ref := kobev1.ObjectRef{Name: s.inst.Spec.LeaseRef.Name, UID: s.inst.Spec.LeaseRef.UID}
	if s.inst.Status.LeaseRef == nil || *s.inst.Status.LeaseRef != ref {
		s.inst.Status.LeaseRef = &ref
	}
	state, msg, err := r.lookupLease(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if state == leaseEnded {
		return r.recycle(ctx, s, kobev1.ReasonLeaseEnded, msg)
	}
	r.thawLeased(ctx, s)
	if wait := leasedWriteWait(s.inst, s.now); wait > 0 {
		// The bind is on record (spec.leaseRef); its status follows once
		// it has lasted, so that a lease released at once costs no write.
		s.patch.KeepStatus()
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.setPhase(s, kobev1.InstanceLeased, kobev1.ReasonBound, msg)
	// The lease watch brings the end of the lease; the backend, the death
	// of the member (InstanceLost).
	return r.watchLeased(ctx, s)
}

// lookupLease judges the member's lease from the cache, and confirms with a
// live read before reporting anything but an active lease or one ended for
// good (endedForGood): a lagging cache must not destroy a member in use.
func (r *Reconciler) lookupLease(ctx context.Context, s *scope) (leaseState, string, error) {
	key := types.NamespacedName{Namespace: s.inst.Namespace, Name: s.inst.Spec.LeaseRef.Name}
	l := &kobev1.ClusterLease{}
	err := r.Client.Get(ctx, key, l)
	if err == nil {
		if state, msg := judgeLease(s.inst, l); state == leaseActive || endedForGood(s.inst, l) {
			return state, msg, nil
		}
	} else if !apierrors.IsNotFound(err) {
		return 0, "", fmt.Errorf("getting lease %s: %w", key.Name, err)
	}
	l = &kobev1.ClusterLease{}
	err = r.APIReader.Get(ctx, key, l)
	if apierrors.IsNotFound(err) {
		state, msg := judgeLease(s.inst, nil)
		return state, msg, nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("reading lease %s: %w", key.Name, err)
	}
	state, msg := judgeLease(s.inst, l)
	return state, msg, nil
}

// recycle moves a member to Recycling and deletes the object; the
// finalizer destroys the member. A bound member is fenced before anything
// is written: its leaseRef is write-once, so no one can hand it out again,
// and the fence is what ends its holder's access. A member that never
// became Ready leaves with a failure reason: the pool controller counts it
// in the pool's failure streak (pool.Failed), and the finalizer waits for
// that count.
//
// A member whose lease ended, the routine end, is deleted without the move
// to Recycling being written first: the deletion says it, its lease's
// status says why, and the finalizer, which fences again until a fence is
// recorded, writes Recycling only if the teardown takes longer than one
// pass (issue 27: a status write per transition, none nobody reads).
func (r *Reconciler) recycle(ctx context.Context, s *scope, reason, msg string) (ctrl.Result, error) {
	r.fence(ctx, s)
	if reason == kobev1.ReasonLeaseEnded {
		s.patch.KeepStatus()
		return r.deleteInstance(ctx, s)
	}
	return r.moveToRecycling(ctx, s, reason, msg)
}

// moveToRecycling writes the move to Recycling, then deletes the object.
func (r *Reconciler) moveToRecycling(ctx context.Context, s *scope, reason, msg string) (ctrl.Result, error) {
	r.setPhase(s, kobev1.InstanceRecycling, reason, msg)
	if err := s.patch.Status(ctx); err != nil || s.patch.Done() {
		return ctrl.Result{}, err
	}
	return r.deleteInstance(ctx, s)
}

// recycleAgain deletes a member left Recycling (an operator stopped between
// the move and the delete), fencing it first.
func (r *Reconciler) recycleAgain(ctx context.Context, s *scope) (ctrl.Result, error) {
	r.fence(ctx, s)
	if err := s.patch.Status(ctx); err != nil || s.patch.Done() {
		return ctrl.Result{}, err
	}
	return r.deleteInstance(ctx, s)
}

func (r *Reconciler) deleteInstance(ctx context.Context, s *scope) (ctrl.Result, error) {
	uid := s.inst.UID
	if err := r.Client.Delete(ctx, s.inst, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("deleting %s: %w", s.inst.Name, err)
	}
	r.deleted.Add(client.ObjectKeyFromObject(s.inst), uid)
	return ctrl.Result{}, nil
}

// backendNotWired holds a member whose backend this operator lacks: it
// cannot be built, and it must not be forgotten either.
func (r *Reconciler) backendNotWired(_ context.Context, s *scope) (ctrl.Result, error) {
	msg := fmt.Sprintf("backend %q is not wired in this operator", s.inst.Spec.Backend.Type)
	r.mark(s, kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonBackendUnavailable, msg, corev1.EventTypeWarning)
	return ctrl.Result{RequeueAfter: time.Minute}, nil
}

// timeoutVerdict names why a member still Creating at creatingTimeout
// failed. A member the backend refused (its Provisioned condition says
// ProvisionFailed or BackendUnavailable) failed for that reason: counting it
// as a creatingTimeout reap would report churn and tell the administrator
// to raise creatingTimeout, which would not help.
func timeoutVerdict(inst *kobev1.ClusterInstance, timeout time.Duration) (reason, msg string) {
	msg = fmt.Sprintf("still Creating after creatingTimeout %s", timeout)
	if c := meta.FindStatusCondition(inst.Status.Conditions, kobev1.ConditionProvisioned); c != nil && c.Status == metav1.ConditionFalse &&
		(c.Reason == kobev1.ReasonProvisionFailed || c.Reason == kobev1.ReasonBackendUnavailable) {
		return c.Reason, msg + "; the backend refused it: " + c.Message
	}
	if c := meta.FindStatusCondition(inst.Status.Conditions, kobev1.ConditionBootstrapsComplete); c != nil && c.Status == metav1.ConditionFalse {
		return kobev1.ReasonBootstrapFailed, msg + "; its bootstraps were not applied: " + c.Message
	}
	return kobev1.ReasonCreatingTimeout, msg
}
