package wire

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Lease phases as the API reports them in Lease.Phase.
const (
	PhasePending     = "Pending"
	PhaseBound       = "Bound"
	PhaseReleased    = "Released"
	PhaseExpired     = "Expired"
	PhaseRecycling   = "Recycling"
	PhaseQuarantined = "Quarantined"
)

// PhaseEnded reports whether a lease in phase can never become Bound again.
func PhaseEnded(phase string) bool {
	switch phase {
	case PhaseReleased, PhaseExpired, PhaseRecycling, PhaseQuarantined:
		return true
	}
	return false
}

// Lease is the lease object of POST /v1/leases and GET /v1/leases/{id}.
type Lease struct {
	// ID is the lease's name, e.g. "lease-a1b2c3d4e5f6".
	ID string `json:"id"`
	// Alias is the caller's own name for the lease, if it gave one.
	Alias string `json:"alias,omitempty"`
	// Phase is one of the Phase* constants.
	Phase string `json:"phase"`
	// Pool the lease draws from.
	Pool string `json:"pool"`
	// Profile is a synonym of Pool kept for older clients.
	Profile string `json:"profile"`
	// ClusterName is the bound member; empty while Pending.
	ClusterName string `json:"cluster_name"`
	// QueuePosition is the live 1-based place in the pool's queue while
	// Pending, else 0.
	QueuePosition int `json:"queue_position"`
	// EffectiveTTL is the TTL accepted after policy clamping, e.g. "30m".
	EffectiveTTL string `json:"effective_ttl"`
	// ExpiresAt is when the operator ends the lease (RFC 3339, UTC); nil while Pending.
	ExpiresAt *time.Time `json:"expires_at"`
	// Extensions counts granted extensions.
	Extensions int `json:"extensions"`
	// MaxExtensions caps Extensions.
	MaxExtensions int `json:"max_extensions"`
	// HeartbeatTimeout is the lease's heartbeat timeout, empty without one.
	HeartbeatTimeout string `json:"heartbeat_timeout,omitempty"`
	// HeartbeatEndsAt is when the lease ends unless a heartbeat comes first
	// (a lease with a heartbeat timeout that has not ended).
	HeartbeatEndsAt *time.Time `json:"heartbeat_ends_at,omitempty"`
	// IdleTimeout is the lease's idle timeout (its pool's or its policy's;
	// Proxy access only), empty without one.
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// IdleEndsAt is when the bound lease ends unless a request goes through
	// the connect proxy to its member first.
	IdleEndsAt *time.Time `json:"idle_ends_at,omitempty"`
	// Kubeconfig for the bound cluster; only once Bound, and only for the owner.
	Kubeconfig string `json:"kubeconfig,omitempty"`

	// Requester is the identity that asked for the lease; pool listings show
	// it only on the caller's own leases.
	Requester string `json:"requester,omitempty"`
	// CreatedAt is when the lease was requested.
	CreatedAt *time.Time `json:"created_at,omitempty"`
	// BoundAt is when the lease was bound to a member.
	BoundAt *time.Time `json:"bound_at,omitempty"`
	// Reason says why the lease is in its phase (e.g. why it ended).
	Reason string `json:"reason,omitempty"`
}

// PoolPolicy is the leasing policy a pool advertises.
type PoolPolicy struct {
	// Mode is "fixed" or "autoscaled".
	Mode string `json:"mode"`
	// TTL is the pool's default lease TTL.
	TTL string `json:"ttl,omitempty"`
	// WarmTarget is how many Ready members the pool keeps.
	WarmTarget int `json:"warmTarget"`
	// MaxClusters caps an autoscaled pool.
	MaxClusters int `json:"maxClusters,omitempty"`
	// ScaleDownAfter is how long an autoscaled pool waits before shrinking.
	ScaleDownAfter string `json:"scaleDownAfter,omitempty"`
	// QueueTimeout is how long a lease may wait in an autoscaled pool's queue.
	QueueTimeout string `json:"queueTimeout,omitempty"`
}

// Pool is the pool object of GET /v1/pools and GET /v1/pools/{name}. Its
// counter names follow the ClusterPool status (camelCase), as the contract says.
type Pool struct {
	Name        string     `json:"name"`
	Phase       string     `json:"phase"`
	Ready       int        `json:"ready"`
	Leased      int        `json:"leased"`
	Creating    int        `json:"creating"`
	Recycling   int        `json:"recycling"`
	Unhealthy   int        `json:"unhealthy"`
	Quarantined int        `json:"quarantined"`
	QueueDepth  int        `json:"queueDepth"`
	Policy      PoolPolicy `json:"policy"`
}

// Status is the answer of GET /v1/status, which needs no credentials.
type Status struct {
	Version string     `json:"version"`
	Auth    StatusAuth `json:"auth"`
	// Pools is only filled for authenticated callers.
	Pools []Pool `json:"pools,omitempty"`
}

// StatusAuth lists the authentication methods the server accepts.
type StatusAuth struct {
	// Methods such as "oidc", "ssh", "token", "serviceAccount".
	Methods []string `json:"methods"`
	// Audience identifies this kobe installation: KobeSSH signatures must
	// name it (their aud parameter), so that a request signed for one
	// installation is refused by every other. Clients pin it on first use.
	// Empty when the server accepts no SSH signatures.
	Audience string `json:"audience,omitempty"`
}

// CreateLeaseRequest is the body of POST /v1/leases.
type CreateLeaseRequest struct {
	Pool string `json:"pool,omitempty"`
	// Profile is accepted as a synonym of Pool.
	Profile string `json:"profile,omitempty"`
	// TTL such as "30m"; the pool's default when empty.
	TTL string `json:"ttl,omitempty"`
	// Alias is the caller's own name for the lease (see ValidateAlias),
	// unique among its active leases and usable wherever a lease id is.
	Alias string `json:"alias,omitempty"`
	// CleanupMode is "Standard" (the default) or "VerifiedDestroy": the
	// member's teardown is proven and a receipt kept; refused (422
	// CleanupModeUnsupported) when the pool's backend cannot prove it.
	CleanupMode string `json:"cleanupMode,omitempty"`
	// HeartbeatTimeout such as "2m" (10s to 24h): the lease ends
	// (HeartbeatMissed) once no POST /v1/leases/{id}/heartbeat came for that
	// long. Empty: no heartbeats, the lease lasts its ttl.
	HeartbeatTimeout string `json:"heartbeat_timeout,omitempty"`
}

// PoolName is Pool, or Profile when Pool is empty.
func (r CreateLeaseRequest) PoolName() string {
	if r.Pool != "" {
		return r.Pool
	}
	return r.Profile
}

// ExtendLeaseRequest is the body of PATCH /v1/leases/{id}.
type ExtendLeaseRequest struct {
	// ExtendTTL such as "30m" is added to the lease's expiry.
	ExtendTTL string `json:"extend_ttl"`
}

// ExtendLeaseResponse is the answer of PATCH /v1/leases/{id}.
type ExtendLeaseResponse struct {
	ExpiresAt     *time.Time `json:"expires_at"`
	Extensions    int        `json:"extensions"`
	MaxExtensions int        `json:"max_extensions"`
	// Kubeconfig is set when the server re-minted the client certificate
	// for the new expiry.
	Kubeconfig string `json:"kubeconfig,omitempty"`
}

// WhoAmI is the answer of GET /v1/whoami: who the server thinks the caller is
// and what its AccessPolicy allows.
type WhoAmI struct {
	Identity            string   `json:"identity"`
	Policy              string   `json:"policy"`
	Method              string   `json:"method"`
	Pools               []string `json:"pools"`
	MaxTTL              string   `json:"max_ttl,omitempty"`
	MaxConcurrentLeases int      `json:"max_concurrent_leases,omitempty"`
	MaxExtensions       int      `json:"max_extensions,omitempty"`
}

// WireTime returns t as the API writes times: UTC, whole seconds, so that it
// encodes as RFC 3339 ("2026-04-09T15:00:00Z"). The zero time gives nil.
func WireTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Second)
	return &u
}

// FormatTTL renders d the way the API writes TTLs: "30m", "1h30m", "2h",
// "45s", rather than time.Duration's "30m0s".
func FormatTTL(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// LeaseFilter is GET /v1/leases' query: exact matches, empty fields match
// everything.
type LeaseFilter struct {
	Alias string
	Pool  string
}

// Query renders f as query parameters.
func (f LeaseFilter) Query() url.Values {
	q := url.Values{}
	if f.Alias != "" {
		q.Set("alias", f.Alias)
	}
	if f.Pool != "" {
		q.Set("pool", f.Pool)
	}
	return q
}

// LeaseWaitParam is GET /v1/leases/{id}'s query parameter that asks the
// server to hold the answer while the lease is Pending: it answers once the
// lease is no longer Pending or once the duration given (such as "15s") has
// passed, whichever comes first. A server that does not know it answers at
// once, as without it.
const LeaseWaitParam = "wait"

// MaxLeaseWait is the longest wait a server holds a GET for.
const MaxLeaseWait = 30 * time.Second

// ParseLeaseWait reads LeaseWaitParam's value: a Go duration from 1ms to
// MaxLeaseWait. The empty string is no wait.
func ParseLeaseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond || d > MaxLeaseWait {
		return 0, fmt.Errorf("%s=%q: want a duration from 1ms to %s, such as \"15s\"", LeaseWaitParam, v, MaxLeaseWait)
	}
	return d, nil
}
