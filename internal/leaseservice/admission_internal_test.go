package leaseservice

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestAdmit judges requests without an API server. The answers are the
// HTTP API's (../shared/notes/http-api.md): a refusal's code, reason,
// message, detail and Retry-After are what the API sends, unchanged.
func TestAdmit(t *testing.T) {
	p := &auth.Principal{Identity: "ci", Policy: "ci", Rule: kobev1.AccessRule{
		Pools: []string{"small", "big*"}, MaxTTL: &metav1.Duration{Duration: 2 * time.Hour}}}
	healthy := func(name string, mutate ...func(*kobev1.ClusterPool)) *kobev1.ClusterPool {
		pl := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
			Spec: kobev1.ClusterPoolSpec{TTL: &metav1.Duration{Duration: 30 * time.Minute}, Backend: kobev1.BackendSpec{Type: kobev1.BackendSim}}}
		for _, m := range mutate {
			m(pl)
		}
		return pl
	}
	deleting := func(pl *kobev1.ClusterPool) { pl.DeletionTimestamp = ptr.To(metav1.Now()) }
	noBackend := func(pl *kobev1.ClusterPool) {
		pl.Status.Conditions = []metav1.Condition{{Type: kobev1.ConditionCapacity, Status: metav1.ConditionFalse,
			Reason: kobev1.ReasonBackendUnavailable, Message: "down", ObservedGeneration: 1}}
	}
	quarantined := func(pl *kobev1.ClusterPool) {
		pl.Spec.Scaling = &kobev1.ScalingSpec{MaxClusters: ptr.To[int32](2)}
		pl.Status.Quarantined = 2
	}
	local := func(pl *kobev1.ClusterPool) { pl.Spec.Backend.Type = kobev1.BackendLocal }
	onlyLocal := func(b kobev1.BackendType) bool { return b == kobev1.BackendLocal }
	noProxy := fmt.Errorf("%w: start kobe-operator with --connect-url", ErrProxyNotConfigured)

	type want struct {
		code                           int
		reason, message, detail, retry string
		sentinel                       error
		audit                          string
		counted                        bool
	}
	cases := []struct {
		name    string
		in      admissionInput
		ttl     time.Duration // when admitted
		refusal *want
	}{
		{name: "the pool's TTL", in: admissionInput{req: CreateRequest{Pool: "small"}, pool: healthy("small")}, ttl: 30 * time.Minute},
		{name: "the request's TTL", in: admissionInput{req: CreateRequest{Pool: "small", TTL: time.Hour}, pool: healthy("small")}, ttl: time.Hour},
		{name: "a TTL over the rule's maxTtl is clamped", in: admissionInput{req: CreateRequest{Pool: "big-1", TTL: 5 * time.Hour}, pool: healthy("big-1")}, ttl: 2 * time.Hour},
		{name: "an alias", in: admissionInput{req: CreateRequest{Pool: "small", Alias: "my-run"}, pool: healthy("small")}, ttl: 30 * time.Minute},
		{name: "VerifiedDestroy on a backend that proves it", in: admissionInput{req: CreateRequest{Pool: "small", CleanupMode: kobev1.CleanupVerifiedDestroy},
			pool: healthy("small", local), verifiable: onlyLocal}, ttl: 30 * time.Minute},
		{name: "Standard never asks the backend", in: admissionInput{req: CreateRequest{Pool: "small", CleanupMode: kobev1.CleanupStandard}, pool: healthy("small")}, ttl: 30 * time.Minute},

		{name: "a bad alias, before the pool's authorisation", in: admissionInput{req: CreateRequest{Pool: "secret", Alias: "Not An Alias"}},
			refusal: &want{code: http.StatusBadRequest, reason: wire.ReasonBadRequest, message: "bad request", sentinel: ErrInvalid}},
		{name: "a negative TTL", in: admissionInput{req: CreateRequest{Pool: "small", TTL: -time.Second}, pool: healthy("small")},
			refusal: &want{code: http.StatusBadRequest, reason: wire.ReasonBadRequest, message: "bad request", detail: "ttl must be greater than zero, got -1s", sentinel: ErrInvalid}},
		{name: "no pool", in: admissionInput{},
			refusal: &want{code: http.StatusBadRequest, reason: wire.ReasonBadRequest, message: "bad request", detail: "pool is required", sentinel: ErrInvalid}},
		{name: "a pool the caller may not use, whether or not it exists", in: admissionInput{req: CreateRequest{Pool: "secret"}},
			refusal: &want{code: http.StatusForbidden, reason: wire.ReasonPoolNotAllowed, message: "pool not allowed",
				detail: `identity "ci" may not lease from pool "secret" under policy ci`, sentinel: ErrPoolNotAllowed, audit: "refused: pool not allowed"}},
		{name: "no such pool", in: admissionInput{req: CreateRequest{Pool: "big-2"}},
			refusal: &want{code: http.StatusNotFound, reason: wire.ReasonPoolNotFound, message: "pool not found",
				detail: `there is no pool "big-2"; GET /v1/pools lists the pools you may use`, sentinel: ErrPoolNotFound}},
		{name: "a pool being deleted, before the cleanup mode", in: admissionInput{req: CreateRequest{Pool: "small", CleanupMode: kobev1.CleanupVerifiedDestroy}, pool: healthy("small", deleting)},
			refusal: &want{code: http.StatusServiceUnavailable, reason: wire.ReasonPoolBeingDeleted, message: "pool unavailable",
				detail: `pool "small" is being deleted; retry later`, retry: wire.UnavailableRetryAfter, sentinel: ErrPoolUnavailable, audit: "refused: PoolBeingDeleted", counted: true}},
		{name: "a pool whose backend is unavailable", in: admissionInput{req: CreateRequest{Pool: "small"}, pool: healthy("small", noBackend)},
			refusal: &want{code: http.StatusServiceUnavailable, reason: wire.ReasonBackendUnavailable, message: "pool unavailable",
				detail: `the backend of pool "small" is unavailable: down; retry later`, retry: wire.UnavailableRetryAfter, sentinel: ErrPoolUnavailable, audit: "refused: BackendUnavailable", counted: true}},
		{name: "a pool whose members are all Quarantined", in: admissionInput{req: CreateRequest{Pool: "small"}, pool: healthy("small", quarantined)},
			refusal: &want{code: http.StatusServiceUnavailable, reason: wire.ReasonPoolQuarantined, message: "pool unavailable",
				retry: wire.UnavailableRetryAfter, sentinel: ErrPoolUnavailable, audit: "refused: PoolQuarantined", counted: true}},
		{name: "VerifiedDestroy without any verifiable backend", in: admissionInput{req: CreateRequest{Pool: "small", CleanupMode: kobev1.CleanupVerifiedDestroy}, pool: healthy("small", local)},
			refusal: &want{code: http.StatusUnprocessableEntity, reason: wire.ReasonCleanupModeUnsupported, message: lease.ErrCleanupModeUnsupported.Error(),
				detail: "no backend wired in this operator can prove a member destroyed; use cleanupMode Standard", sentinel: lease.ErrCleanupModeUnsupported,
				audit: "refused: cleanupMode VerifiedDestroy", counted: true}},
		{name: "VerifiedDestroy on a backend that cannot prove it, before the proxy", in: admissionInput{req: CreateRequest{Pool: "small", CleanupMode: kobev1.CleanupVerifiedDestroy},
			pool: healthy("small"), verifiable: onlyLocal, proxyErr: noProxy},
			refusal: &want{code: http.StatusUnprocessableEntity, reason: wire.ReasonCleanupModeUnsupported, message: lease.ErrCleanupModeUnsupported.Error(),
				detail:   `pool small uses backend "sim", which cannot prove a member destroyed; use cleanupMode Standard, or a pool whose backend can (local, kubernetes)`,
				sentinel: lease.ErrCleanupModeUnsupported, audit: "refused: cleanupMode VerifiedDestroy", counted: true}},
		{name: "a proxied pool without a connect proxy", in: admissionInput{req: CreateRequest{Pool: "small"}, pool: healthy("small"), proxyErr: noProxy},
			refusal: &want{code: http.StatusServiceUnavailable, reason: wire.ReasonProxyNotConfigured, message: "connect proxy not configured",
				detail: "start kobe-operator with --connect-url", sentinel: ErrProxyNotConfigured, audit: "refused: no connect proxy", counted: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.principal = p
			ttl, r := admit(tc.in)
			if tc.refusal == nil {
				if r != nil || ttl != tc.ttl {
					t.Fatalf("admit = %s, %v; want %s admitted", ttl, r, tc.ttl)
				}
				return
			}
			w := tc.refusal
			if r == nil {
				t.Fatalf("admitted with TTL %s; want a %d refusal", ttl, w.code)
			}
			if r.Code != w.code || r.Reason != w.reason || r.Message != w.message || r.RetryAfter != w.retry ||
				(w.detail != "" && r.Detail != w.detail) || r.Detail == "" {
				t.Errorf("refusal %d %s %q %q (Retry-After %q); want %d %s %q %q (Retry-After %q)",
					r.Code, r.Reason, r.Message, r.Detail, r.RetryAfter, w.code, w.reason, w.message, w.detail, w.retry)
			}
			if !errors.Is(r, w.sentinel) || r.Error() != r.Message+": "+trimRetry(r) {
				t.Errorf("refusal error %q: want it to wrap %v and read sentinel: detail", r.Error(), w.sentinel)
			}
			if r.audit != w.audit || r.counted != w.counted {
				t.Errorf("audit %q counted %v; want %q, %v", r.audit, r.counted, w.audit, w.counted)
			}
		})
	}
}

// trimRetry is r's detail as its error says it: a 503 of an unserviceable
// pool adds "; retry later" to the answer only.
func trimRetry(r *Refusal) string {
	var u *UnavailableError
	if errors.As(r, &u) {
		return u.Message
	}
	return r.Detail
}

// TestLedgerRefusals: the refusals of a caller's limits answer as the API
// always did.
func TestLedgerRefusals(t *testing.T) {
	ruled := &auth.Principal{Identity: "ci", Policy: "ci", Rule: kobev1.AccessRule{MaxConcurrentLeases: ptr.To[int32](2)}}
	defaulted := &auth.Principal{Identity: "ci", Policy: "ci", DefaultMaxConcurrentLeases: 3}
	cases := []struct {
		name                  string
		r                     *Refusal
		code                  int
		reason, detail, retry string
		sentinel              error
	}{
		{"alias", aliasInUse("lease-abc", "run"), http.StatusConflict, wire.ReasonAliasInUse,
			`your lease lease-abc already has alias "run"; release it or choose another alias`, "", ErrAliasInUse},
		{"rule's lease limit", leaseLimit(ruled, 2, 2), http.StatusTooManyRequests, wire.ReasonConcurrentLeaseLimit,
			`identity "ci" holds 2 of 2 allowed leases under policy ci; release one first`, "30", ErrLeaseLimit},
		{"default lease limit", leaseLimit(defaulted, 3, 3), http.StatusTooManyRequests, wire.ReasonConcurrentLeaseLimit,
			`identity "ci" holds 3 of 3 allowed leases under policy ci (the server's default: the policy's rule sets no maxConcurrentLeases); release one first`, "30", ErrLeaseLimit},
		{"queue limit", queueLimit(defaulted, 20), http.StatusTooManyRequests, wire.ReasonQueuedLeaseLimit,
			`identity "ci" has 20 leases waiting for a member under policy ci, the most allowed; wait for one to be bound or release one`, "30", ErrQueueLimit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			if r.Code != tc.code || r.Reason != tc.reason || r.Message != tc.sentinel.Error() || r.Detail != tc.detail || r.RetryAfter != tc.retry {
				t.Errorf("refusal %d %s %q %q (Retry-After %q); want %d %s %q %q (Retry-After %q)",
					r.Code, r.Reason, r.Message, r.Detail, r.RetryAfter, tc.code, tc.reason, tc.sentinel, tc.detail, tc.retry)
			}
			if !errors.Is(r, tc.sentinel) || r.audit != "refused: "+r.Error() || !r.counted {
				t.Errorf("refusal %q: want it to wrap %v, audited with its text and counted (audit %q, counted %v)", r.Error(), tc.sentinel, r.audit, r.counted)
			}
		})
	}
}
