package accesspolicy

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
)

// Reconciler sets AccessPolicy status. Only Client is required.
type Reconciler struct {
	Client client.Client
	// HTTPClient reaches OIDC issuers; defaults to one with a 10s timeout.
	HTTPClient *http.Client
	// Recorder, when set, records an event when Ready changes.
	Recorder events.EventRecorder
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
}

// SetupWithManager registers the controller: policies by generation, and
// the Secrets that token policies name.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("accesspolicy").
		For(&kobev1.AccessPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.policiesForSecret)).
		Complete(r)
}

// policiesForSecret maps a Secret to the token policies of its namespace
// that name it. Policies are few, so no index is needed.
func (r *Reconciler) policiesForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list kobev1.AccessPolicyList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing access policies for a Secret failed", "secret", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		if t := list.Items[i].Spec.Auth.Token; t != nil && t.SecretRef.Name == o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// Reconcile checks one policy and patches its status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pol := &kobev1.AccessPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, pol); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pol.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	before := pol.DeepCopy()
	prev := meta.FindStatusCondition(pol.Status.Conditions, kobev1.ConditionReady)

	v, err := r.check(ctx, pol)
	if err != nil {
		return ctrl.Result{}, err
	}
	status := metav1.ConditionFalse
	if v.ready {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&pol.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionReady, Status: status, Reason: v.reason, Message: v.message,
		ObservedGeneration: pol.Generation,
	})
	pol.Status.ObservedGeneration = pol.Generation
	if !equality.Semantic.DeepEqual(before.Status, pol.Status) {
		if err := r.Client.Status().Patch(ctx, pol, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("patching status of access policy %s: %w", pol.Name, err)
		}
	}
	if prev == nil || prev.Reason != v.reason {
		r.event(pol, v)
		ctrl.LoggerFrom(ctx).Info("Access policy checked", "ready", v.ready, "reason", v.reason, "message", v.message)
	}
	return ctrl.Result{RequeueAfter: requeueAfter(v, prev, r.clock().Now())}, nil
}

func (r *Reconciler) event(pol *kobev1.AccessPolicy, v verdict) {
	if r.Recorder == nil {
		return
	}
	kind := corev1.EventTypeNormal
	if !v.ready {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(pol, nil, kind, v.reason, "Check", "%s", v.message)
}

func (r *Reconciler) clock() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// verdict is the outcome of checking a policy.
type verdict struct {
	ready   bool
	reason  string
	message string
	// recheck asks to check again later (issuer reachability).
	recheck bool
}

// check runs the checks of the policy's method in order; the first that
// fails decides. Errors are for failures to read, which are retried.
func (r *Reconciler) check(ctx context.Context, pol *kobev1.AccessPolicy) (verdict, error) {
	if err := auth.ValidatePolicy(pol); err != nil {
		return verdict{reason: kobev1.ReasonPolicyInvalid, message: truncate(err.Error())}, nil
	}
	method := auth.MethodOf(pol)
	switch method {
	case auth.MethodToken:
		if v, done, err := r.checkSecret(ctx, pol); done || err != nil {
			return v, err
		}
	case auth.MethodOIDC:
		if err := r.checkIssuer(ctx, pol.Spec.Auth.OIDC.Issuer); err != nil {
			return verdict{reason: kobev1.ReasonIssuerUnreachable, recheck: true,
				message: truncate(fmt.Sprintf("OIDC issuer %s: %v", pol.Spec.Auth.OIDC.Issuer, err))}, nil
		}
		return verdict{ready: true, reason: kobev1.ReasonPolicyReady, recheck: true,
			message: "OIDC discovery and keys of the issuer are reachable"}, nil
	}
	return verdict{ready: true, reason: kobev1.ReasonPolicyReady, message: fmt.Sprintf("The policy authenticates with %s", method)}, nil
}

const (
	minIssuerRetry = 5 * time.Second
	maxIssuerRetry = 5 * time.Minute
	// issuerRecheck is how often a reachable issuer is checked again.
	issuerRecheck = 10 * time.Minute
)

// requeueAfter spaces the checks of an unreachable issuer: the wait grows
// with how long it has been unreachable (so it roughly doubles), from
// minIssuerRetry to maxIssuerRetry. It is computed from the condition, so
// it survives a restart.
func requeueAfter(v verdict, prev *metav1.Condition, now time.Time) time.Duration {
	if !v.recheck {
		return 0
	}
	if v.ready {
		return issuerRecheck
	}
	if prev == nil || prev.Reason != v.reason {
		return minIssuerRetry
	}
	return min(max(now.Sub(prev.LastTransitionTime.Time), minIssuerRetry), maxIssuerRetry)
}

func truncate(s string) string {
	const limit = 512
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
