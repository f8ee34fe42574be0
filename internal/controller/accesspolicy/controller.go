package accesspolicy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/kunobi-ninja/kobe/internal/controller/conditions"
	"github.com/kunobi-ninja/kobe/internal/controller/deps"
	"github.com/kunobi-ninja/kobe/internal/controller/patch"
)

// ControllerName names the controller and its events' reporter.
const ControllerName = "kobe-accesspolicy"

// Reconciler sets AccessPolicy status.
type Reconciler struct {
	// Client is the manager's client. Required.
	Client client.Client
	// HTTPClient reaches OIDC issuers; defaults to one with a 10s timeout.
	HTTPClient *http.Client
	// Recorder records an event when Ready's reason changes. Required.
	Recorder events.EventRecorder
	// Clock is the time conditions and issuer back-off are computed at.
	// Required.
	Clock clock.PassiveClock
}

// SetupWithManager registers the controller: policies by generation, and
// the Secrets that token policies name. It fails when a required
// dependency is missing.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.validate(); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("accesspolicy").
		For(&kobev1.AccessPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.policiesForSecret)).
		Complete(r)
}

// validate names every required dependency that is missing.
func (r *Reconciler) validate() error {
	return deps.Require(ControllerName, map[string]bool{"Client": r.Client == nil, "Recorder": r.Recorder == nil, "Clock": r.Clock == nil})
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

// Reconcile checks one policy: get, one deferred fenced status patch, then
// the check and its Ready condition. A policy holds nothing outside itself,
// so it has no finalizer and nothing is done once it is being deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	pol := &kobev1.AccessPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, pol); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pol.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	h := patch.New(r.Client, pol)
	defer func() { res, retErr = h.Finish(ctx, res, retErr) }()

	prev := meta.FindStatusCondition(pol.Status.Conditions, kobev1.ConditionReady).DeepCopy()
	v, err := r.check(ctx, pol)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	r.setReady(pol, v, now)
	if prev == nil || prev.Reason != v.reason {
		ctrl.LoggerFrom(ctx).Info("Access policy checked", "ready", v.ready, "reason", v.reason, "message", v.message)
	}
	return ctrl.Result{RequeueAfter: requeueAfter(v, prev, now)}, nil
}

// setReady writes the verdict as the Ready condition; a new reason is told
// as an event (Warning when the policy authenticates nobody).
func (r *Reconciler) setReady(pol *kobev1.AccessPolicy, v verdict, now time.Time) {
	status, kind := metav1.ConditionFalse, corev1.EventTypeWarning
	if v.ready {
		status, kind = metav1.ConditionTrue, corev1.EventTypeNormal
	}
	conditions.Setter{Recorder: r.Recorder, Now: now}.Mark(pol, kind, metav1.Condition{
		Type: kobev1.ConditionReady, Status: status, Reason: v.reason, Message: v.message,
	})
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
	if open := auth.RulesMatchingEveryToken(pol); len(open) > 0 {
		return verdict{reason: kobev1.ReasonRuleMatchesEveryToken, message: truncate(openRulesMessage(pol, open))}, nil
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

// openRulesMessage names the rules that would admit every token of the
// issuer, and the two ways to fix them.
func openRulesMessage(pol *kobev1.AccessPolicy, open []int) string {
	names := make([]string, len(open))
	for i, idx := range open {
		names[i] = fmt.Sprintf("rules[%d]", idx)
	}
	return fmt.Sprintf("%s of this %s policy %s no match, so %s every token the issuer signs; %s nobody until %s match (a claim and its value) or, to admit every such token on purpose, matchAny: true",
		strings.Join(names, ", "), auth.MethodOf(pol), plural(len(open), "has", "have"), plural(len(open), "it would admit", "they would admit"),
		plural(len(open), "it authenticates", "they authenticate"), plural(len(open), "it sets", "they set"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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
