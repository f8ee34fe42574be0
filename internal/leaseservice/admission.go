package leaseservice

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Refusal is a lease request refused by admission or by its caller's
// limits. Like a Kubernetes admission response's metav1.Status, it carries
// the HTTP API's whole answer (status code, reason, message, detail), so
// that the API answers every refusal of a request the same way; errors.Is
// and errors.As see the service's error (Err) through it.
type Refusal struct {
	// Code is the HTTP status of the answer.
	Code int
	// Reason is the answer's machine-readable wire.Reason*.
	Reason string
	// Message is the answer's short "error" text: its sentinel's.
	Message string
	// Detail says what to do about it; safe to show the caller.
	Detail string
	// RetryAfter is the Retry-After header in seconds, "" for none.
	RetryAfter string
	// Err is the service's error: a sentinel of errors.go wrapped with
	// Detail, lease.ErrCleanupModeUnsupported, or an *UnavailableError.
	Err error

	// audit is the outcome logged for the refusal; "" logs nothing (a
	// malformed request, a pool that does not exist).
	audit string
	// counted: the refusal counts in kobe_lease_requests_total, which it
	// may only when the pool is known to exist.
	counted bool
}

func (r *Refusal) Error() string { return r.Err.Error() }

// Unwrap makes errors.Is and errors.As see Err.
func (r *Refusal) Unwrap() error { return r.Err }

// refusal builds the Refusal of err, which wraps sentinel: its detail is
// err's text after the sentinel's.
func refusal(code int, reason string, sentinel, err error) *Refusal {
	return &Refusal{Code: code, Reason: reason, Message: sentinel.Error(),
		Detail: strings.TrimPrefix(err.Error(), sentinel.Error()+": "), Err: err}
}

func invalid(err error) *Refusal {
	return refusal(http.StatusBadRequest, wire.ReasonBadRequest, ErrInvalid, err)
}

// audited marks r to be logged with outcome and, when counted, counted.
func (r *Refusal) audited(outcome string, counted bool) *Refusal {
	r.audit, r.counted = outcome, counted
	return r
}

// unavailableReasons are the reasons of a 503 for each cause of an
// unserviceable pool.
var unavailableReasons = map[pool.Cause]string{
	pool.CauseDeleting:           wire.ReasonPoolBeingDeleted,
	pool.CauseBackendUnavailable: wire.ReasonBackendUnavailable,
	pool.CauseQuarantined:        wire.ReasonPoolQuarantined,
}

// admissionInput is everything admission judges a lease request on, read
// before the judgement (Service.gatherAdmission) so that the judgement
// itself reads nothing.
type admissionInput struct {
	principal *auth.Principal
	req       CreateRequest
	// pool is the requested pool; nil when it does not exist, or was not
	// read because the caller may not use it.
	pool *kobev1.ClusterPool
	// verifiable says whether a backend's members can be proven destroyed
	// (binding.Binder.Verifiable); nil: none can.
	verifiable func(kobev1.BackendType) bool
	// proxyErr is why this server cannot reach the pool's members through
	// its connect proxy (it wraps ErrProxyNotConfigured); nil when it can,
	// or when the pool's members are reached directly.
	proxyErr error
}

// admissionCheck refuses a request, or returns nil to pass it on.
type admissionCheck func(in *admissionInput) *Refusal

// admissionChecks run in this order, the first refusal wins: the request
// itself, the pool's authorisation (before anything of the pool is
// known), its existence, whether it can ever serve, then what the lease
// asks of the pool's backend and of this server. None depends on time: the
// caller's limits, which do, are kept exact across replicas by its ledger
// (reserve, takeQueueSlot).
var admissionChecks = []admissionCheck{
	checkAlias,
	checkTTL,
	checkPoolName,
	checkPoolAllowed,
	checkPoolExists,
	checkServiceable,
	checkCleanupMode,
	checkProxy,
}

// admit judges a lease request: the TTL it is granted (its own or the
// pool's, clamped to the caller's maximum), or the first refusal of
// admissionChecks.
func admit(in admissionInput) (time.Duration, *Refusal) {
	for _, check := range admissionChecks {
		if r := check(&in); r != nil {
			return 0, r
		}
	}
	ttl := in.req.TTL
	if ttl == 0 {
		ttl = lease.PoolTTL(in.pool)
	}
	ttl, _ = in.principal.ClampTTL(ttl)
	return ttl, nil
}

func checkAlias(in *admissionInput) *Refusal {
	if in.req.Alias == "" {
		return nil
	}
	if err := wire.ValidateAlias(in.req.Alias); err != nil {
		return invalid(fmt.Errorf("%w: %w", ErrInvalid, err))
	}
	return nil
}

func checkTTL(in *admissionInput) *Refusal {
	if in.req.TTL < 0 {
		return invalid(fmt.Errorf("%w: ttl must be greater than zero, got %s", ErrInvalid, in.req.TTL))
	}
	return nil
}

func checkPoolName(in *admissionInput) *Refusal {
	if err := validName("pool", in.req.Pool); err != nil {
		return invalid(err)
	}
	return nil
}

// checkPoolAllowed refuses a pool the caller may not use, whether or not it
// exists. No metric: the name is the caller's, not a pool known to exist,
// and must not mint a time series.
func checkPoolAllowed(in *admissionInput) *Refusal {
	if err := allowPool(in.principal, in.req.Pool); err != nil {
		return refusal(http.StatusForbidden, wire.ReasonPoolNotAllowed, ErrPoolNotAllowed, err).
			audited("refused: pool not allowed", false)
	}
	return nil
}

func checkPoolExists(in *admissionInput) *Refusal {
	if in.pool == nil {
		return refusal(http.StatusNotFound, wire.ReasonPoolNotFound, ErrPoolNotFound, poolNotFound(in.req.Pool))
	}
	return nil
}

// checkServiceable refuses a pool nothing in which can become Ready.
func checkServiceable(in *admissionInput) *Refusal {
	u := pool.CheckServiceable(in.pool)
	if u == nil {
		return nil
	}
	reason, ok := unavailableReasons[u.Cause]
	if !ok {
		reason = wire.ReasonInternalError
	}
	return (&Refusal{Code: http.StatusServiceUnavailable, Reason: reason, Message: ErrPoolUnavailable.Error(),
		Detail: u.Message + "; retry later", RetryAfter: wire.UnavailableRetryAfter, Err: &UnavailableError{Unserviceable: *u}}).
		audited("refused: "+string(u.Cause), true)
}

// checkCleanupMode refuses a cleanup the pool's backend cannot prove, never
// downgrading it (spec 000).
func checkCleanupMode(in *admissionInput) *Refusal {
	if err := lease.CheckCleanupMode(in.req.CleanupMode, in.pool, in.verifiable); err != nil {
		return refusal(http.StatusUnprocessableEntity, wire.ReasonCleanupModeUnsupported, lease.ErrCleanupModeUnsupported, err).
			audited("refused: cleanupMode "+string(in.req.CleanupMode), true)
	}
	return nil
}

// checkProxy refuses a lease whose kubeconfig could never be minted: its
// members are reached through a connect proxy this server cannot offer.
func checkProxy(in *admissionInput) *Refusal {
	if in.proxyErr != nil {
		return refusal(http.StatusServiceUnavailable, wire.ReasonProxyNotConfigured, ErrProxyNotConfigured, in.proxyErr).
			audited("refused: no connect proxy", true)
	}
	return nil
}

// aliasInUse, leaseLimit and queueLimit are the refusals of the caller's
// ledger (ledger.go), given what it holds.
func aliasInUse(holder, alias string) *Refusal {
	err := fmt.Errorf("%w: your lease %s already has alias %q; release it or choose another alias", ErrAliasInUse, holder, alias)
	return refusal(http.StatusConflict, wire.ReasonAliasInUse, ErrAliasInUse, err).limit()
}

func leaseLimit(p *auth.Principal, held, limit int32) *Refusal {
	err := fmt.Errorf("%w: identity %q holds %d of %d allowed leases under policy %s%s; release one first", ErrLeaseLimit, p.Identity, held, limit, p.Policy, limitSource(p))
	r := refusal(http.StatusTooManyRequests, wire.ReasonConcurrentLeaseLimit, ErrLeaseLimit, err)
	r.RetryAfter = limitRetryAfter
	return r.limit()
}

func queueLimit(p *auth.Principal, queued int32) *Refusal {
	err := fmt.Errorf("%w: identity %q has %d leases waiting for a member under policy %s, the most allowed; wait for one to be bound or release one", ErrQueueLimit, p.Identity, queued, p.Policy)
	r := refusal(http.StatusTooManyRequests, wire.ReasonQueuedLeaseLimit, ErrQueueLimit, err)
	r.RetryAfter = limitRetryAfter
	return r.limit()
}

// limit marks r, a refusal by a limit of the caller's, to be logged with
// its text and counted.
func (r *Refusal) limit() *Refusal {
	return r.audited("refused: "+r.Error(), true)
}

// limitRetryAfter is the Retry-After, in seconds, of a refusal by a limit of
// the caller's.
const limitRetryAfter = "30"
