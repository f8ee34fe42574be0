//go:build integration

package apiserver_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// startServer runs a second API server on the package's manager (its
// cache and clients), with an Authenticator of its own made from opts
// (Reader and Namespace filled in), until the test ends. It returns the
// server's base URL; more change the server's options.
func startServer(t *testing.T, opts auth.Options, more ...func(*apiserver.Options)) string {
	t.Helper()
	opts.Reader, opts.Namespace = fx.mgr.GetCache(), ns
	apiOpts := apiserver.Options{Addr: "127.0.0.1:0", Auth: auth.NewAuthenticator(opts), Version: testVersion}
	for _, f := range more {
		f(&apiOpts)
	}
	srv, err := newServer(fx.mgr, apiOpts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("API server: %v", err)
		}
	})
	testenv.Eventually(t, 10*time.Second, "the API server to listen", func() error {
		if srv.Addr() == "" {
			return errors.New("not listening yet")
		}
		return nil
	})
	return "http://" + srv.Addr()
}

// callAt is call against the server at base.
func callAt(t *testing.T, base string, creds apiclient.Credentials, method, path string, body any) response {
	t.Helper()
	req := prepare(t, creds, method, path, body)
	req.URL.Host = strings.TrimPrefix(base, "http://")
	return send(t, req)
}

// reviewCounter counts the TokenReviews a clientset sends the real API
// server; while gate is set, each one waits for it to close.
type reviewCounter struct {
	next  http.RoundTripper
	count atomic.Int32
	mu    sync.Mutex
	gate  chan struct{}
}

func (c *reviewCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/tokenreviews") {
		c.count.Add(1)
		c.mu.Lock()
		gate := c.gate
		c.mu.Unlock()
		if gate != nil {
			<-gate
		}
	}
	return c.next.RoundTrip(req)
}

// countingClientset is a clientset of the test control plane whose
// TokenReviews counter counts.
func countingClientset(t *testing.T) (kubernetes.Interface, *reviewCounter) {
	t.Helper()
	counter := &reviewCounter{}
	cfg := rest.CopyConfig(fx.env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter }
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, counter
}

// forgedJWT is a JWT-shaped bearer token with a random signature, claiming
// issuer iss.
func forgedJWT(t *testing.T, iss string) apiclient.BearerToken {
	t.Helper()
	enc := base64.RawURLEncoding
	sig := make([]byte, 32)
	if _, err := rand.Read(sig); err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(map[string]any{"iss": iss, "sub": "system:serviceaccount:" + ns + ":ci-runner", "jti": enc.EncodeToString(sig[:8])})
	if err != nil {
		t.Fatal(err)
	}
	return apiclient.BearerToken(enc.EncodeToString([]byte(`{"alg":"RS256","kid":"x"}`)) + "." + enc.EncodeToString(payload) + "." + enc.EncodeToString(sig))
}

// saToken is a TokenRequest token of ServiceAccount sa for audience.
func saToken(t *testing.T, sa, audience string) apiclient.BearerToken {
	t.Helper()
	tr, err := fx.kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", sa, err)
	}
	return apiclient.BearerToken(tr.Status.Token)
}

// issuerOf is the unverified "iss" of a JWT.
func issuerOf(t *testing.T, token apiclient.BearerToken) string {
	t.Helper()
	parts := strings.Split(string(token), ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.Iss == "" {
		t.Fatalf("token has no iss: %v", err)
	}
	return c.Iss
}

// TestForgedTokensCostNoTokenReview: an anonymous flood of distinct
// JWT-shaped tokens (the package's serviceAccount policy in-cluster
// exists) makes no TokenReview on the host API server when they name
// another issuer than the host's, which the server learns from the host's
// discovery document; tokens that name the host's issuer find the reviews
// bounded, and are refused at once (429) without a review while the bound
// is reached. A legitimate ServiceAccount caller still authenticates.
func TestForgedTokensCostNoTokenReview(t *testing.T) {
	kube, reviews := countingClientset(t)
	base := startServer(t, auth.Options{
		TokenReviewer: kube.AuthenticationV1().TokenReviews(), IssuerDiscovery: kube.Discovery().RESTClient(),
		MaxConcurrentReviews: 1,
	})
	legit := saToken(t, "ci-runner", saAudience)
	hostIssuer := issuerOf(t, legit)

	t.Run("other issuers", func(t *testing.T) {
		const flood = 200
		var wg sync.WaitGroup
		codes := make([]int, flood)
		for i := range flood {
			iss := []string{"x", "https://evil.example.com", "", hostIssuer + "x"}[i%4]
			tok := forgedJWT(t, iss)
			wg.Go(func() { codes[i] = callAt(t, base, tok, http.MethodGet, "/v1/whoami", nil).code })
		}
		wg.Wait()
		for i, code := range codes {
			if code != http.StatusUnauthorized {
				t.Fatalf("forged token %d: HTTP %d, want 401", i, code)
			}
		}
		if n := reviews.count.Load(); n != 0 {
			t.Fatalf("%d forged tokens of other issuers cost %d TokenReviews, want 0", flood, n)
		}
	})

	t.Run("legitimate caller", func(t *testing.T) {
		who := decode[wire.WhoAmI](t, callAt(t, base, legit, http.MethodGet, "/v1/whoami", nil), http.StatusOK)
		if who.Policy != "in-cluster" || who.Identity != "system:serviceaccount:"+ns+":ci-runner" {
			t.Fatalf("whoami: %+v", who)
		}
		if n := reviews.count.Load(); n != 1 {
			t.Fatalf("%d TokenReviews for one legitimate token, want 1", n)
		}
	})

	t.Run("the host's issuer, forged: reviews are bounded", func(t *testing.T) {
		gate := make(chan struct{})
		reviews.mu.Lock()
		reviews.gate = gate
		reviews.mu.Unlock()
		defer func() {
			reviews.mu.Lock()
			reviews.gate = nil
			reviews.mu.Unlock()
		}()
		before := reviews.count.Load()
		// One review takes the only slot and hangs on the host.
		held := make(chan response, 1)
		go func() { held <- callAt(t, base, forgedJWT(t, hostIssuer), http.MethodGet, "/v1/whoami", nil) }()
		testenv.Eventually(t, 10*time.Second, "the first review to reach the host", func() error {
			if reviews.count.Load() != before+1 {
				return errors.New("not yet")
			}
			return nil
		})
		for i := range 20 {
			start := time.Now()
			r := callAt(t, base, forgedJWT(t, hostIssuer), http.MethodGet, "/v1/whoami", nil)
			requireReason(t, requireError(t, r, http.StatusTooManyRequests, "too many requests", "ServiceAccount tokens"), wire.ReasonTooManyRequests)
			if r.header.Get("Retry-After") == "" || time.Since(start) > 2*time.Second {
				t.Fatalf("request %d: Retry-After %q after %s; want a fast 429 with Retry-After", i, r.header.Get("Retry-After"), time.Since(start))
			}
		}
		if n := reviews.count.Load(); n != before+1 {
			t.Fatalf("%d TokenReviews while the bound of 1 was reached, want 1", n-before)
		}
		close(gate)
		if r := <-held; r.code != http.StatusUnauthorized {
			t.Fatalf("the forged token under review: %s, want 401", r)
		}
		// The slot is free again: a new legitimate token is reviewed, once
		// this source's budget of new tokens (spent by the flood above)
		// has refilled.
		legitAgain := saToken(t, "ci-runner", saAudience)
		var r response
		testenv.Eventually(t, 10*time.Second, "a new legitimate token from the flooding source to be reviewed", func() error {
			if r = callAt(t, base, legitAgain, http.MethodGet, "/v1/whoami", nil); r.code == http.StatusTooManyRequests {
				return fmt.Errorf("still 429: %s", r)
			}
			return nil
		})
		if who := decode[wire.WhoAmI](t, r, http.StatusOK); who.Policy != "in-cluster" {
			t.Fatalf("whoami: %+v", who)
		}
	})
}

// TestServiceAccountPolicyNeedsAudience: the API server refuses a
// serviceAccount policy without audiences, which would accept every pod's
// default token (one the host API server accepts).
func TestServiceAccountPolicyNeedsAudience(t *testing.T) {
	for _, auds := range [][]string{nil, {}, {""}} {
		p := policy("sa-no-audience", "", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: auds}},
			kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: "serviceaccount", Value: "intruder"}, Pools: []string{"ci-*"}})
		err := fx.env.Client.Create(t.Context(), p)
		if err == nil {
			_ = fx.env.Client.Delete(context.Background(), p)
			t.Fatalf("a serviceAccount policy with audiences %q was accepted", auds)
		}
		if !strings.Contains(err.Error(), "spec.auth.serviceAccount.audiences") {
			t.Fatalf("audiences %q refused with %v; want the field named", auds, err)
		}
	}
}

// TestDefaultMaxConcurrentLeases: a caller whose rule sets no
// maxConcurrentLeases holds at most the server's default (Bound or
// Pending), refused beyond it with the 429 a rule's own limit gives, and
// whoami reports it; a rule's own setting wins, above the default too.
func TestDefaultMaxConcurrentLeases(t *testing.T) {
	const def = 2
	base := startServer(t, auth.Options{DefaultMaxConcurrentLeases: def})
	const pool = "defcap"
	makeHangupPool(t, pool, 4)
	addPolicies(t, tokenPolicy("defcap-open", kobev1.AccessRule{Pools: []string{pool, queuePool}})...)
	addPolicies(t, tokenPolicy("defcap-own", kobev1.AccessRule{Pools: []string{pool, queuePool}, MaxConcurrentLeases: ptr.To[int32](3)})...)
	open, own := tokenOf("defcap-open"), tokenOf("defcap-own")
	// Leases left waiting in the shared queue pool would shift other
	// tests' queue positions: release them all (before the policies go).
	t.Cleanup(func() {
		for _, name := range []string{"defcap-open", "defcap-own"} {
			hash := leaseservice.RequesterHash(&auth.Principal{Policy: name, Identity: name})
			if err := fx.env.Client.DeleteAllOf(context.Background(), &kobev1.ClusterLease{}, client.InNamespace(ns),
				client.MatchingLabels{kobev1.LabelRequesterHash: hash}); err != nil {
				t.Errorf("deleting the leases of %s: %v", name, err)
			}
		}
	})
	waitWhoAmI(t, open, "policy defcap-open", func(w wire.WhoAmI) bool { return w.Policy == "defcap-open" })
	waitWhoAmI(t, own, "policy defcap-own", func(w wire.WhoAmI) bool { return w.Policy == "defcap-own" })

	who := decode[wire.WhoAmI](t, callAt(t, base, open, http.MethodGet, "/v1/whoami", nil), http.StatusOK)
	if who.MaxConcurrentLeases != def {
		t.Fatalf("whoami reports max_concurrent_leases %d, want the default %d", who.MaxConcurrentLeases, def)
	}
	var bound []string
	for range def {
		r := callAt(t, base, open, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool, TTL: "10m"})
		bound = append(bound, decode[wire.Lease](t, r, http.StatusCreated).ID)
	}
	before := leaseObjects(t)
	for _, p := range []string{pool, queuePool} { // bound or queued, the cap holds
		r := callAt(t, base, open, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: p, TTL: "10m"})
		e := requireError(t, r, http.StatusTooManyRequests, "concurrent lease limit reached", fmt.Sprintf("holds %d of %d", def, def))
		requireReason(t, e, wire.ReasonConcurrentLeaseLimit)
		if !strings.Contains(e.Detail, "default") || r.header.Get("Retry-After") != "30" {
			t.Fatalf("refusal %+v, Retry-After %q: want the default named and Retry-After 30", e, r.header.Get("Retry-After"))
		}
	}
	requireNoNewLease(t, before)
	// The package's server has no default: the same caller is not capped
	// there (the cap is the server's setting, not the policy's).
	r := call(t, open, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: queuePool, TTL: "10m"})
	extra := decode[wire.Lease](t, r, http.StatusAccepted).ID
	if r := call(t, open, http.MethodDelete, "/v1/leases/"+extra, nil); r.code != http.StatusNoContent {
		t.Fatalf("release: %s", r)
	}

	// The rule's own limit wins over the default, also above it.
	who = decode[wire.WhoAmI](t, callAt(t, base, own, http.MethodGet, "/v1/whoami", nil), http.StatusOK)
	if who.MaxConcurrentLeases != 3 {
		t.Fatalf("whoami under a rule with maxConcurrentLeases 3 reports %d", who.MaxConcurrentLeases)
	}
	for range 3 {
		r := callAt(t, base, own, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: queuePool, TTL: "10m"})
		if r.code != http.StatusAccepted {
			t.Fatalf("lease under the rule's own limit: %s", r)
		}
	}
	r = callAt(t, base, own, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: queuePool, TTL: "10m"})
	requireError(t, r, http.StatusTooManyRequests, "concurrent lease limit reached", "holds 3 of 3")

	// Releasing one makes room for one.
	if r := callAt(t, base, open, http.MethodDelete, "/v1/leases/"+bound[0], nil); r.code != http.StatusNoContent {
		t.Fatalf("release: %s", r)
	}
	decode[wire.Lease](t, callAt(t, base, open, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool, TTL: "10m"}), http.StatusCreated)
}
