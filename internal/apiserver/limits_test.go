//go:build integration

package apiserver_test

import (
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestMaxTTL shows a rule's maxTtl (1h, policy capped) clamping the TTL a
// caller asks for, or the pool's default, in the answer and in the lease.
func TestMaxTTL(t *testing.T) {
	for _, tc := range []struct {
		name, pool, ttl string
		want            time.Duration
	}{
		{"longer request is clamped", "ci-small", "3h", time.Hour},
		{"shorter request is kept", "ci-small", "30m", 30 * time.Minute},
		{"longer pool default (2h) is clamped", "ci-large", "", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().Truncate(time.Second)
			l := createLease(t, tokenOf("capped"), tc.pool, tc.ttl)
			after := time.Now()
			if l.EffectiveTTL != wire.FormatTTL(tc.want) {
				t.Fatalf("effective_ttl %q, want %q", l.EffectiveTTL, wire.FormatTTL(tc.want))
			}
			if l.ExpiresAt == nil || l.ExpiresAt.Before(before.Add(tc.want)) || l.ExpiresAt.After(after.Add(tc.want)) {
				t.Fatalf("expires_at %v, want now+%s (between %v and %v)", l.ExpiresAt, tc.want, before.Add(tc.want), after.Add(tc.want))
			}
			obj := leaseObject(t, l.ID)
			if obj.Spec.TTL == nil || obj.Spec.TTL.Duration != tc.want || !obj.Status.ExpiresAt.Time.Equal(*l.ExpiresAt) {
				t.Fatalf("lease %s has ttl %v and expiresAt %v; the answer said %s and %v", l.ID, obj.Spec.TTL, obj.Status.ExpiresAt, l.EffectiveTTL, l.ExpiresAt)
			}
		})
	}
}

// TestMaxConcurrentLeases sends 20 lease requests of one identity (policy
// burst, maxConcurrentLeases 3) at once: exactly 3 get a lease, 17 a 429
// with Retry-After, and the API server holds 3 leases of that identity.
// No controller runs, so nothing deletes or ends a lease during the burst:
// the leases listed afterwards are every lease the burst created, which
// bounds how many the identity held at any moment.
func TestMaxConcurrentLeases(t *testing.T) {
	const callers, limit = 20, 3
	const identity = "burst"
	creds := tokenOf(identity)

	reqs := make([]*http.Request, callers)
	for i := range reqs {
		reqs[i] = prepare(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "ci-large", TTL: "10m"})
	}
	results := make([]response, callers)
	errs := make([]error, callers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			<-start
			results[i], errs[i] = roundTrip(reqs[i])
		})
	}
	close(start)
	wg.Wait()

	var leased []string
	limited := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch r.code {
		case http.StatusCreated, http.StatusAccepted:
			leased = append(leased, decode[wire.Lease](t, r, r.code).ID)
		case http.StatusTooManyRequests:
			limited++
			requireError(t, r, http.StatusTooManyRequests, "concurrent lease limit reached", "holds 3 of 3")
			if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s <= 0 {
				t.Fatalf("429 with Retry-After %q, want a positive number of seconds", r.header.Get("Retry-After"))
			}
		default:
			t.Fatalf("request %d: got %s; want 201, 202 or 429", i, r)
		}
	}
	if len(leased) != limit || limited != callers-limit {
		t.Fatalf("%d leased and %d refused with 429; want %d and %d", len(leased), limited, limit, callers-limit)
	}
	slices.Sort(leased)
	held := leasesOf(t, identity)
	if got := leaseNames(held); !slices.Equal(got, leased) {
		t.Fatalf("the API server holds leases %v of %s; the answers granted %v", got, identity, leased)
	}
	for _, l := range held {
		if lease.IsEnded(l.Status.Phase) {
			t.Fatalf("lease %s ended (%s) during the burst", l.Name, l.Status.Phase)
		}
	}

	// The limit counts leases held now: a released one makes room for one.
	if r := call(t, creds, http.MethodDelete, "/v1/leases/"+leased[0], nil); r.code != http.StatusNoContent {
		t.Fatalf("releasing %s: %s", leased[0], r)
	}
	createLease(t, creds, "ci-large", "10m")
	r := call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "ci-large", TTL: "10m"})
	requireError(t, r, http.StatusTooManyRequests, "concurrent lease limit reached", "holds 3 of 3")
	active := 0
	for _, l := range leasesOf(t, identity) {
		if !lease.IsEnded(l.Status.Phase) {
			active++
		}
	}
	if active != limit {
		t.Fatalf("%s holds %d active leases, want %d", identity, active, limit)
	}
}

// TestMaxExtensions shows a rule's maxExtensions (1, policy extender): the
// first PATCH extends, the second is a 409 and changes nothing.
func TestMaxExtensions(t *testing.T) {
	creds := tokenOf("extender")
	l := createLease(t, creds, "ci-small", "30m")
	if l.MaxExtensions != 1 || l.Extensions != 0 {
		t.Fatalf("new lease: extensions %d of %d, want 0 of 1", l.Extensions, l.MaxExtensions)
	}
	path := "/v1/leases/" + l.ID
	ext := decode[wire.ExtendLeaseResponse](t, call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "15m"}), http.StatusOK)
	if ext.ExpiresAt == nil || !ext.ExpiresAt.Equal(l.ExpiresAt.Add(15*time.Minute)) || ext.Extensions != 1 || ext.MaxExtensions != 1 || ext.Kubeconfig == "" {
		t.Fatalf("first extension: %+v; want expires_at %v, 1 of 1, a kubeconfig", ext, l.ExpiresAt.Add(15*time.Minute))
	}
	obj := leaseObject(t, l.ID)
	if obj.Status.Extensions != 1 || !obj.Status.ExpiresAt.Time.Equal(*ext.ExpiresAt) {
		t.Fatalf("lease %s: extensions %d, expiresAt %v after the first extension", l.ID, obj.Status.Extensions, obj.Status.ExpiresAt)
	}

	r := call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "15m"})
	requireError(t, r, http.StatusConflict, "extension limit reached", "extended 1 of 1")
	requireBoundUntouched(t, l.ID, obj)
}

// TestPoolGlobs shows a rule's pool glob ("ci-*", policy ci-only) deciding
// which pools a caller may lease from and see.
func TestPoolGlobs(t *testing.T) {
	creds := tokenOf("ci-only")
	t.Run("lease", func(t *testing.T) {
		createLease(t, creds, "ci-small", "")
		before := leaseObjects(t)
		r := call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "dev"})
		requireError(t, r, http.StatusForbidden, "pool not allowed", `may not lease from pool "dev"`)
		requireNoNewLease(t, before)
	})
	t.Run("list pools", func(t *testing.T) {
		got := decode[[]wire.Pool](t, call(t, creds, http.MethodGet, "/v1/pools", nil), http.StatusOK)
		names := make([]string, len(got))
		for i := range got {
			names[i] = got[i].Name
		}
		if want := []string{"ci-large", "ci-small"}; !slices.Equal(names, want) {
			t.Fatalf("GET /v1/pools lists %v, want %v", names, want)
		}
	})
	t.Run("read pools", func(t *testing.T) {
		if p := decode[wire.Pool](t, call(t, creds, http.MethodGet, "/v1/pools/ci-large", nil), http.StatusOK); p.Name != "ci-large" {
			t.Fatalf("GET /v1/pools/ci-large answered pool %q", p.Name)
		}
		for _, path := range []string{"/v1/pools/dev", "/v1/pools/dev/leases"} {
			requireError(t, call(t, creds, http.MethodGet, path, nil), http.StatusForbidden, "pool not allowed", `pool "dev"`)
		}
	})
}
