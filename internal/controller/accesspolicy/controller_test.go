//go:build integration

package accesspolicy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const ns = "kobe-system"

func TestController(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	mgr := env.NewManager(t, ns)
	r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(ControllerName), Clock: clock.RealClock{}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)

	policy := func(name string, a kobev1.AuthSpec) *kobev1.AccessPolicy {
		p := &kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       kobev1.AccessPolicySpec{Auth: a, Rules: []kobev1.AccessRule{{Pools: []string{"*"}, MatchAny: true}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// update applies edit to the latest version of p.
	update := func(p *kobev1.AccessPolicy, edit func()) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			edit()
			return c.Update(ctx, p)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// waitReady waits until the policy's Ready condition describes its
	// current generation with the wanted status and reason.
	waitReady := func(name string, status metav1.ConditionStatus, reason string, message ...string) *metav1.Condition {
		t.Helper()
		var got *metav1.Condition
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("policy %s Ready=%s/%s", name, status, reason), func() error {
			var p kobev1.AccessPolicy
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionReady)
			if cond != nil && cond.Status == status && cond.Reason == reason &&
				p.Status.ObservedGeneration == p.Generation && cond.ObservedGeneration == p.Generation &&
				(len(message) == 0 || strings.Contains(cond.Message, message[0])) {
				got = cond
				return nil
			}
			return fmt.Errorf("generation %d, status %+v", p.Generation, p.Status)
		})
		return got
	}
	// waitEvents waits until the policy's events carry exactly these
	// reasons (each reason change is told once, in any order).
	waitEvents := func(name string, reasons ...string) {
		t.Helper()
		want := slices.Clone(reasons)
		slices.Sort(want)
		testenv.Eventually(t, 20*time.Second, "events "+strings.Join(want, ",")+" on "+name, func() error {
			var list eventsv1.EventList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return err
			}
			var got []string
			for _, e := range list.Items {
				if e.Regarding.Name == name && e.Regarding.Kind == "AccessPolicy" {
					if strings.Contains(e.Note, "top-secret-value") {
						t.Fatalf("event %s leaks the token", e.Name)
					}
					n := 1
					if e.Series != nil { // a repeated event is one object with a count
						n = int(e.Series.Count)
					}
					for range n {
						got = append(got, e.Reason)
					}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("events %v", got)
			}
			return nil
		})
	}

	t.Run("token Secret missing, then created", func(t *testing.T) {
		policy("static", kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "static-token"}}})
		cond := waitReady("static", metav1.ConditionFalse, kobev1.ReasonSecretNotFound)
		if !strings.Contains(cond.Message, "static-token") {
			t.Fatalf("message %q does not name the Secret", cond.Message)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "static-token", Namespace: ns},
			Data:       map[string][]byte{"other": []byte("top-secret-value")},
		}
		if err := c.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		cond = waitReady("static", metav1.ConditionFalse, kobev1.ReasonSecretNotFound, `no non-empty key "token"`)
		if strings.Contains(cond.Message, "top-secret-value") {
			t.Fatalf("message %q", cond.Message)
		}
		secret.Data["token"] = []byte("top-secret-value")
		if err := c.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		cond = waitReady("static", metav1.ConditionTrue, kobev1.ReasonPolicyReady)
		if strings.Contains(cond.Message, "top-secret-value") {
			t.Fatal("condition leaks the token")
		}
		if err := c.Delete(ctx, secret); err != nil {
			t.Fatal(err)
		}
		waitReady("static", metav1.ConditionFalse, kobev1.ReasonSecretNotFound)
		// Missing key and missing Secret share a reason: one event for the
		// first SecretNotFound, one for PolicyReady, one for the second.
		waitEvents("static", kobev1.ReasonSecretNotFound, kobev1.ReasonPolicyReady, kobev1.ReasonSecretNotFound)
	})

	t.Run("oidc issuer reachable and unreachable", func(t *testing.T) {
		var issuer *httptest.Server
		issuer = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/.well-known/openid-configuration":
				_ = json.NewEncoder(w).Encode(map[string]any{"issuer": issuer.URL, "jwks_uri": issuer.URL + "/keys"})
			case "/keys":
				_, _ = w.Write([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","kid":"1"}]}`))
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(issuer.Close)
		policy("github", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: issuer.URL, Audience: []string{"kobe"}}})
		waitReady("github", metav1.ConditionTrue, kobev1.ReasonPolicyReady)

		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + l.Addr().String()
		_ = l.Close()
		policy("dead-issuer", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: dead, Audience: []string{"kobe"}}})
		waitReady("dead-issuer", metav1.ConditionFalse, kobev1.ReasonIssuerUnreachable)
	})

	// An issuer is fetched from the operator's network: plain http to
	// anything but loopback is refused before any request is made.
	t.Run("oidc issuer over plain http is refused", func(t *testing.T) {
		p := policy("plain-http", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: "http://issuer.invalid/dex", Audience: []string{"kobe"}}})
		waitReady("plain-http", metav1.ConditionFalse, kobev1.ReasonPolicyInvalid,
			"oidc.issuer must use https (plain http only to a loopback host: 127.0.0.0/8, ::1 or localhost), not http://issuer.invalid")
		update(p, func() { p.Spec.Auth.OIDC.Issuer = "https://issuer.invalid/dex?x=" })
		waitReady("plain-http", metav1.ConditionFalse, kobev1.ReasonPolicyInvalid, "oidc.issuer must have no user info, query or fragment")
	})

	// A policy's author reads its status: what an issuer (or whatever
	// answers at its URL) sends never shows there or in its events, only
	// the step and the kind of failure.
	t.Run("nothing the issuer answers reaches the status", func(t *testing.T) {
		const secret = "internal-secret-5f3a"
		var srv *httptest.Server
		srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			base, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
			self := srv.URL + "/" + base
			switch r.URL.Path {
			case "/fails/.well-known/openid-configuration":
				http.Error(w, "database password: "+secret, http.StatusInternalServerError)
			case "/other/.well-known/openid-configuration":
				_ = json.NewEncoder(w).Encode(map[string]any{"issuer": "https://" + secret, "jwks_uri": self + "/keys"})
			case "/keys-fail/.well-known/openid-configuration", "/redirect/.well-known/openid-configuration":
				_ = json.NewEncoder(w).Encode(map[string]any{"issuer": self, "jwks_uri": self + "/keys"})
			case "/keys-fail/keys":
				http.Error(w, secret, http.StatusServiceUnavailable)
			case "/redirect/keys":
				http.Redirect(w, r, "http://issuer.invalid/"+secret, http.StatusFound)
			case "/plain-keys/.well-known/openid-configuration":
				_ = json.NewEncoder(w).Encode(map[string]any{"issuer": self, "jwks_uri": "http://issuer.invalid/" + secret})
			case "/not-json/.well-known/openid-configuration":
				_, _ = w.Write([]byte(secret))
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(srv.Close)
		for name, want := range map[string]string{
			"fails":      "discovery: the answer is HTTP 5xx, not 200",
			"other":      "discovery: the document names another issuer",
			"keys-fail":  "fetching keys: the answer is HTTP 5xx, not 200",
			"redirect":   "fetching keys: redirected to a URL that is neither https nor http to a loopback host",
			"plain-keys": "discovery: jwks_uri is neither https nor http to a loopback host",
			"not-json":   "discovery: the answer is not a JSON document",
		} {
			policy("leak-"+name, kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: srv.URL + "/" + name, Audience: []string{"kobe"}}})
			cond := waitReady("leak-"+name, metav1.ConditionFalse, kobev1.ReasonIssuerUnreachable)
			if strings.Contains(cond.Message, secret) || !strings.Contains(cond.Message, want) {
				t.Errorf("policy leak-%s: message %q, want %q and nothing the server sent", name, cond.Message, want)
			}
		}
		var list eventsv1.EventList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if strings.Contains(e.Note, secret) {
				t.Errorf("event %s about %s carries what the server sent: %q", e.Name, e.Regarding.Name, e.Note)
			}
		}
	})

	t.Run("invalid policy", func(t *testing.T) {
		p := policy("keys", kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{"not-a-key"}}})
		waitReady("keys", metav1.ConditionFalse, kobev1.ReasonPolicyInvalid)
		// Fixing it is a new generation, observed by the next status.
		update(p, func() {
			p.Spec.Auth.SSH.AuthorizedKeys = []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRmuvfsbh0/RgpTwpETIDbA45qwQAJXcPYrdFw8XO11 alice"}
		})
		waitReady("keys", metav1.ConditionTrue, kobev1.ReasonPolicyReady)

		bad := policy("template", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{"kobe"}}})
		update(bad, func() { bad.Spec.Identity = "{unclosed" })
		cond := waitReady("template", metav1.ConditionFalse, kobev1.ReasonPolicyInvalid)
		if !strings.Contains(cond.Message, "identity") {
			t.Fatalf("message %q", cond.Message)
		}
	})

	// A template that rendering can no longer make unambiguous (two claims
	// side by side) is refused with a message that says why.
	t.Run("ambiguous identity template", func(t *testing.T) {
		p := policy("side-by-side", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{"kobe"}}})
		update(p, func() { p.Spec.Identity = "{namespace}{serviceaccount}" })
		waitReady("side-by-side", metav1.ConditionFalse, kobev1.ReasonPolicyInvalid,
			"claims {namespace} and {serviceaccount} must be separated by literal text")
		update(p, func() { p.Spec.Identity = "{namespace}/{serviceaccount}" })
		waitReady("side-by-side", metav1.ConditionTrue, kobev1.ReasonPolicyReady)
	})

	// An oidc or serviceAccount rule without match would admit every token
	// the issuer signs: the policy is not Ready, names the rule, tells it
	// with an Event, and is Ready again once the rule says matchAny: true
	// or gets a match.
	t.Run("rule without match admits every token", func(t *testing.T) {
		p := policy("open-sa", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{"kobe"}}})
		waitReady("open-sa", metav1.ConditionTrue, kobev1.ReasonPolicyReady)
		update(p, func() {
			p.Spec.Rules = []kobev1.AccessRule{
				{Pools: []string{"ci-*"}, Match: &kobev1.ClaimMatch{Claim: "namespace", Value: "ci"}},
				{Pools: []string{"*"}},
			}
		})
		waitReady("open-sa", metav1.ConditionFalse, kobev1.ReasonRuleMatchesEveryToken, "rules[1] of this serviceAccount policy has no match")
		waitEvents("open-sa", kobev1.ReasonPolicyReady, kobev1.ReasonRuleMatchesEveryToken)
		update(p, func() { p.Spec.Rules[1].MatchAny = true })
		waitReady("open-sa", metav1.ConditionTrue, kobev1.ReasonPolicyReady)
		update(p, func() { p.Spec.Rules[1].MatchAny = false })
		waitReady("open-sa", metav1.ConditionFalse, kobev1.ReasonRuleMatchesEveryToken)
		update(p, func() { p.Spec.Rules[1].Match = &kobev1.ClaimMatch{Claim: "namespace", Value: "dev"} })
		waitReady("open-sa", metav1.ConditionTrue, kobev1.ReasonPolicyReady)

		// The API server refuses a rule that sets both.
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			t.Fatal(err)
		}
		p.Spec.Rules[1].MatchAny = true
		if err := c.Update(ctx, p); err == nil || !strings.Contains(err.Error(), "set either match or matchAny: true, not both") {
			t.Fatalf("update with match and matchAny = %v", err)
		}

		// A token policy names its caller (one Secret): no match is fine.
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "open-token", Namespace: ns}, Data: map[string][]byte{"token": []byte("x")}}
		if err := c.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		tok := &kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "open-token", Namespace: ns},
			Spec: kobev1.AccessPolicySpec{Auth: kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "open-token"}}},
				Rules: []kobev1.AccessRule{{Pools: []string{"*"}}}},
		}
		if err := c.Create(ctx, tok); err != nil {
			t.Fatal(err)
		}
		waitReady("open-token", metav1.ConditionTrue, kobev1.ReasonPolicyReady)
	})
}

// TestSetupRefusesMissingDependencies: a reconciler wired without what it
// needs fails at setup, naming what is missing, instead of panicking later.
func TestSetupRefusesMissingDependencies(t *testing.T) {
	cases := []struct {
		missing string
		unset   func(*Reconciler)
	}{
		{"Client", func(r *Reconciler) { r.Client = nil }},
		{"Recorder", func(r *Reconciler) { r.Recorder = nil }},
		{"Clock", func(r *Reconciler) { r.Clock = nil }},
	}
	for _, tc := range cases {
		t.Run(tc.missing, func(t *testing.T) {
			r := &Reconciler{Client: nonNilClient{}, Recorder: events.NewFakeRecorder(1), Clock: clock.RealClock{}}
			tc.unset(r)
			err := r.SetupWithManager(nil) // refused before the manager is touched
			if err == nil || !strings.Contains(err.Error(), "missing "+tc.missing) {
				t.Errorf("SetupWithManager = %v, want it to name %s", err, tc.missing)
			}
		})
	}
	if err := (&Reconciler{}).validate(); err == nil || !strings.Contains(err.Error(), "missing Client, Clock, Recorder") {
		t.Errorf("validate() = %v, want every missing dependency named", err)
	}
}

// nonNilClient only has to be non-nil: setup is refused before it is used.
type nonNilClient struct{ client.Client }

func TestRequeueAfter(t *testing.T) {
	now := time.Date(2026, 4, 9, 12, 0, 0, 0, time.UTC)
	down := verdict{reason: kobev1.ReasonIssuerUnreachable, recheck: true}
	since := func(d time.Duration) *metav1.Condition {
		return &metav1.Condition{Reason: kobev1.ReasonIssuerUnreachable, LastTransitionTime: metav1.NewTime(now.Add(-d))}
	}
	cases := []struct {
		name string
		v    verdict
		prev *metav1.Condition
		want time.Duration
	}{
		{"not rechecked", verdict{ready: true, reason: kobev1.ReasonPolicyReady}, nil, 0},
		{"reachable issuer", verdict{ready: true, reason: kobev1.ReasonPolicyReady, recheck: true}, nil, issuerRecheck},
		{"first failure", down, nil, minIssuerRetry},
		{"was ready", down, &metav1.Condition{Reason: kobev1.ReasonPolicyReady}, minIssuerRetry},
		{"down 1s", down, since(time.Second), minIssuerRetry},
		{"down 40s", down, since(40 * time.Second), 40 * time.Second},
		{"down an hour", down, since(time.Hour), maxIssuerRetry},
	}
	for _, tc := range cases {
		if got := requeueAfter(tc.v, tc.prev, now); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
