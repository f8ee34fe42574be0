package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// TestHostIssuers: a configured list decides alone; otherwise the issuer
// is read once from the discovery document, a failed read is tried again
// only after issuerRetry, and while it is unknown every token counts as
// possibly the host's (reviewed, within the semaphore).
func TestHostIssuers(t *testing.T) {
	ctx := t.Context()
	static := &hostIssuers{static: []string{"https://a", "https://b"}}
	for iss, want := range map[string]bool{"https://a": true, "https://b": true, "https://c": false, "": false} {
		if ok, known := static.issued(ctx, iss); ok != want || !known {
			t.Errorf("static list, iss %q: %v, %v; want %v, true", iss, ok, known, want)
		}
	}
	if _, known := (&hostIssuers{}).issued(ctx, "x"); known {
		t.Error("without a list or discovery the issuer is known")
	}

	var fetches atomic.Int32
	var failing atomic.Bool
	failing.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		fetches.Add(1)
		if failing.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"https://kubernetes.default.svc.cluster.local","jwks_uri":"https://x/openid/v1/jwks"}`))
	}))
	defer srv.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_800_000_000, 0))
	h := &hostIssuers{rest: kube.Discovery().RESTClient(), clock: clk, log: logr.Discard()}

	if _, known := h.issued(ctx, "https://kubernetes.default.svc.cluster.local"); known || fetches.Load() == 0 {
		t.Fatalf("discovery failing: known %v after %d fetches; want unknown after a fetch", known, fetches.Load())
	}
	failing.Store(false)
	after := fetches.Load()
	for range 10 {
		if _, known := h.issued(ctx, "x"); known {
			t.Fatal("known before issuerRetry passed")
		}
	}
	if fetches.Load() != after {
		t.Fatalf("%d fetches within issuerRetry of a failure, want none", fetches.Load()-after)
	}
	clk.SetTime(clk.Now().Add(issuerRetry))
	for range 10 {
		for iss, want := range map[string]bool{"https://kubernetes.default.svc.cluster.local": true, "x": false} {
			if ok, known := h.issued(ctx, iss); ok != want || !known {
				t.Fatalf("learned issuer, iss %q: %v, %v; want %v, true", iss, ok, known, want)
			}
		}
	}
	if n := fetches.Load() - after; n != 1 {
		t.Fatalf("%d fetches once learned, want 1", n)
	}
}

// TestServiceAccountPolicyNeedsAudiences: a serviceAccount policy naming
// no audience is invalid, with a message that says what to do.
func TestServiceAccountPolicyNeedsAudiences(t *testing.T) {
	rules := []kobev1.AccessRule{{Pools: []string{"ci-*"}, Match: &kobev1.ClaimMatch{Claim: "namespace", Value: "ci"}}}
	for _, tc := range []struct {
		audiences []string
		valid     bool
	}{
		{nil, false},
		{[]string{}, false},
		{[]string{"kobe"}, true},
	} {
		pol := &kobev1.AccessPolicy{Spec: kobev1.AccessPolicySpec{
			Auth:  kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: tc.audiences}},
			Rules: rules,
		}}
		err := ValidatePolicy(pol)
		if tc.valid != (err == nil) || (err != nil && !strings.Contains(err.Error(), "serviceAccount.audiences is empty")) {
			t.Errorf("audiences %v: ValidatePolicy = %v", tc.audiences, err)
		}
	}
}

// acceptingReviewer counts TokenReviews and accepts every token.
type acceptingReviewer struct{ calls atomic.Int32 }

func (r *acceptingReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	r.calls.Add(1)
	out := tr.DeepCopy()
	out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
		User: authnv1.UserInfo{Username: "system:serviceaccount:ci:runner"}}
	return out, nil
}

// TestPolicyWithoutAudienceAcceptsNoToken: a stored serviceAccount policy
// without audiences (made before the CRD required them) authenticates
// nobody and costs no TokenReview, even when the host would accept the
// token.
func TestPolicyWithoutAudienceAcceptsNoToken(t *testing.T) {
	pol := newPolicy("sa", "", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{}}, kobev1.AccessRule{MatchAny: true, Pools: []string{"*"}})
	reviewer := &acceptingReviewer{}
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS, TokenReviewer: reviewer})
	_, err := authenticate(t, a, "Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMifQ.c2ln")
	if !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), "names no audience") {
		t.Fatalf("Authenticate = %v, want a refusal naming the missing audience", err)
	}
	if n := reviewer.calls.Load(); n != 0 {
		t.Fatalf("%d TokenReviews, want 0", n)
	}
}
