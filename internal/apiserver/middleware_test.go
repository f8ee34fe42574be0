//go:build integration

package apiserver_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// authenticatedRoutes are every route that needs credentials, with a body
// the route accepts.
var authenticatedRoutes = []struct {
	method, path string
	body         any
}{
	{http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "ci-small"}},
	{http.MethodGet, "/v1/leases", nil},
	{http.MethodGet, "/v1/leases/lease-000000000000", nil},
	{http.MethodDelete, "/v1/leases/lease-000000000000", nil},
	{http.MethodPatch, "/v1/leases/lease-000000000000", wire.ExtendLeaseRequest{ExtendTTL: "10m"}},
	// Malformed ids are refused only once the caller is known.
	{http.MethodGet, "/v1/leases/NOT_AN_ID", nil},
	{http.MethodDelete, "/v1/leases/NOT_AN_ID", nil},
	{http.MethodGet, "/v1/pools", nil},
	{http.MethodGet, "/v1/pools/ci-small", nil},
	{http.MethodGet, "/v1/pools/no-such-pool", nil},
	{http.MethodGet, "/v1/pools/ci-small/leases", nil},
	{http.MethodGet, "/v1/whoami", nil},
}

// TestAuthenticationMiddleware shows that every route but /v1/status and
// the probes answers 401 to a request without credentials or with bad
// ones, before it looks at the request, and that the principal the
// middleware authenticated is the one the handler serves.
func TestAuthenticationMiddleware(t *testing.T) {
	for _, rt := range authenticatedRoutes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			before := leaseObjects(t)
			for _, tc := range []struct {
				name    string
				creds   apiclient.Credentials
				errText string
			}{
				{"no credentials", nil, "missing credentials"},
				{"unknown token", apiclient.BearerToken("not-a-token-of-any-policy"), "invalid credentials"},
			} {
				r := call(t, tc.creds, rt.method, rt.path, rt.body)
				requireReason(t, requireError(t, r, http.StatusUnauthorized, tc.errText, ""), wire.ReasonUnauthorized)
				if r.header.Get("WWW-Authenticate") == "" {
					t.Fatalf("%s: 401 without WWW-Authenticate", tc.name)
				}
			}
			requireNoNewLease(t, before)
		})
	}
	t.Run("the handler serves the authenticated principal", func(t *testing.T) {
		for _, policy := range []string{"ci-only", "everything"} {
			who := decode[wire.WhoAmI](t, call(t, tokenOf(policy), http.MethodGet, "/v1/whoami", nil), http.StatusOK)
			if who.Identity != policy || who.Policy != policy || who.Method != auth.MethodToken {
				t.Fatalf("whoami as %s: %+v", policy, who)
			}
		}
	})
	t.Run("no credentials needed", func(t *testing.T) {
		for _, path := range []string{"/v1/status", "/healthz", "/readyz"} {
			if r := call(t, nil, http.MethodGet, path, nil); r.code != http.StatusOK {
				t.Errorf("GET %s without credentials: %s", path, r)
			}
		}
		// Metrics are served on the metrics bind address only.
		requireReason(t, requireError(t, call(t, nil, http.MethodGet, "/metrics", nil), http.StatusNotFound, "not found", "/metrics"), wire.ReasonNotFound)
		// A bad credential is still refused where none is needed.
		r := call(t, apiclient.BearerToken("not-a-token-of-any-policy"), http.MethodGet, "/v1/status", nil)
		requireError(t, r, http.StatusUnauthorized, "invalid credentials", "")
	})
	t.Run("body limit comes first", func(t *testing.T) {
		big := []byte(`{"pool":"ci-small","ttl":"` + strings.Repeat("9", 70<<10) + `"}`)
		r := call(t, nil, http.MethodPost, "/v1/leases", big)
		requireReason(t, requireError(t, r, http.StatusRequestEntityTooLarge, "request body too large", "at most"), wire.ReasonBodyTooLarge)
	})
	t.Run("unknown routes and methods", func(t *testing.T) {
		requireReason(t, requireError(t, call(t, nil, http.MethodGet, "/v1/nothing", nil), http.StatusNotFound, "not found", "/v1/nothing"), wire.ReasonNotFound)
		requireReason(t, requireError(t, call(t, nil, http.MethodPut, "/v1/leases", nil), http.StatusMethodNotAllowed, "method not allowed", "PUT"), wire.ReasonMethodNotAllowed)
	})
}

// TestAuthorisationBeforeRead shows that a pool the caller may not use is a
// 403 with the same answer whether or not it exists, on every route that
// names a pool, and that only a pool it may use can be a 404.
func TestAuthorisationBeforeRead(t *testing.T) {
	creds := tokenOf("ci-only")
	const existing, missing = "dev", "dev-never-created"
	routes := []struct {
		name string
		send func(pool string) response
	}{
		{"POST /v1/leases", func(pool string) response {
			return call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool})
		}},
		{"GET /v1/pools/{name}", func(pool string) response { return call(t, creds, http.MethodGet, "/v1/pools/"+pool, nil) }},
		{"GET /v1/pools/{name}/leases", func(pool string) response {
			return call(t, creds, http.MethodGet, "/v1/pools/"+pool+"/leases", nil)
		}},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			before := leaseObjects(t)
			a, b := rt.send(existing), rt.send(missing)
			requireReason(t, requireError(t, a, http.StatusForbidden, "pool not allowed", existing), wire.ReasonPoolNotAllowed)
			requireReason(t, requireError(t, b, http.StatusForbidden, "pool not allowed", missing), wire.ReasonPoolNotAllowed)
			if sa, sb := strings.ReplaceAll(string(a.body), existing, "P"), strings.ReplaceAll(string(b.body), missing, "P"); sa != sb {
				t.Fatalf("the answers tell an existing pool from a missing one:\n%s\n%s", a.body, b.body)
			}
			r := rt.send("ci-never-created")
			requireReason(t, requireError(t, r, http.StatusNotFound, "pool not found", "ci-never-created"), wire.ReasonPoolNotFound)
			requireNoNewLease(t, before)
		})
	}
}

// TestUnavailablePools shows each reason a pool cannot serve: 503 at once,
// with Retry-After and the reason, and no lease left queued behind.
func TestUnavailablePools(t *testing.T) {
	creds := tokenOf("unavail")
	for _, tc := range []struct {
		pool, reason, detail string
	}{
		{deletingPool, wire.ReasonPoolBeingDeleted, "being deleted"},
		{backendlessPool, wire.ReasonBackendUnavailable, "not wired"},
		{quarantinedPool, wire.ReasonPoolQuarantined, "Quarantined"},
	} {
		t.Run(tc.pool, func(t *testing.T) {
			before := leaseObjects(t)
			r := call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: tc.pool, TTL: "10m"})
			requireReason(t, requireError(t, r, http.StatusServiceUnavailable, "pool unavailable", tc.detail), tc.reason)
			if got := r.header.Get("Retry-After"); got != wire.UnavailableRetryAfter {
				t.Fatalf("Retry-After %q, want %q", got, wire.UnavailableRetryAfter)
			}
			requireNoNewLease(t, before)
			// The pool itself can still be read.
			if p := decode[wire.Pool](t, call(t, creds, http.MethodGet, "/v1/pools/"+tc.pool, nil), http.StatusOK); p.Name != tc.pool {
				t.Fatalf("GET /v1/pools/%s answered %q", tc.pool, p.Name)
			}
		})
	}
}
