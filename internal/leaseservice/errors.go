package leaseservice

import (
	"errors"

	"github.com/kunobi-ninja/kobe/internal/pool"
)

// Errors of the service. Each is returned wrapped as "<sentinel>: <detail>",
// where the detail is safe to show the caller and says what to do; a
// refused lease request is a *Refusal wrapping one. Refused extensions wrap lease.ErrNotBound, lease.ErrBadExtension, lease.ErrExpired
// or lease.ErrExtensionLimit instead. Any other error is internal: log it,
// never show it.
var (
	// ErrInvalid: a malformed pool name, TTL, lease id or alias.
	ErrInvalid = errors.New("bad request")
	// ErrPoolNotAllowed: the caller's policy does not allow the pool, whether
	// or not it exists.
	ErrPoolNotAllowed = errors.New("pool not allowed")
	// ErrPoolNotFound: no such pool, among those the caller may use.
	ErrPoolNotFound = errors.New("pool not found")
	// ErrLeaseNotFound: the caller holds no lease with that id or alias.
	ErrLeaseNotFound = errors.New("lease not found")
	// ErrAliasInUse: another active lease of the caller has the alias.
	ErrAliasInUse = errors.New("alias in use")
	// ErrLeaseLimit: the caller holds as many active leases as its policy
	// (or, when its rule sets none, the server's default) allows.
	ErrLeaseLimit = errors.New("concurrent lease limit reached")
	// ErrQueueLimit: the caller, whose rule sets no maxConcurrentLeases,
	// has Options.MaxQueuedPerOwner leases waiting for a member.
	ErrQueueLimit = errors.New("queued lease limit reached")
	// ErrPoolUnavailable: nothing in the pool can become Ready (see
	// UnavailableError for the cause).
	ErrPoolUnavailable = errors.New("pool unavailable")
	// ErrProxyNotConfigured: the pool's members are reached through kobe's
	// connect proxy, which this server cannot offer (no TLS). Never a
	// silent fall back to Direct access.
	ErrProxyNotConfigured = errors.New("connect proxy not configured")
	// ErrLeaseEnded: a heartbeat for a lease that has ended; nothing
	// renews it.
	ErrLeaseEnded = errors.New("lease has ended")
	// ErrNoHeartbeat: a heartbeat for a lease created without a heartbeat
	// timeout.
	ErrNoHeartbeat = errors.New("lease takes no heartbeats")
	// ErrLeaseNotBound: an operation on a lease's member (kobe load) while
	// the lease holds none yet.
	ErrLeaseNotBound = errors.New("lease is not bound")
	// ErrNoImages: kobe load for a member without nodes to hold images.
	ErrNoImages = errors.New("the lease's member takes no images")
	// ErrImportFailed: a node of the member refused an image archive.
	ErrImportFailed = errors.New("importing the images failed")
	// ErrMemberUnavailable: the lease's member cannot be reached from this
	// replica now (a local member of another operator host).
	ErrMemberUnavailable = errors.New("the lease's member is unavailable")
)

// UnavailableError is the error of a lease request for a pool that cannot
// serve it now or later; errors.Is(err, ErrPoolUnavailable) holds.
type UnavailableError struct {
	pool.Unserviceable
}

func (e *UnavailableError) Error() string { return ErrPoolUnavailable.Error() + ": " + e.Message }

// Is makes errors.Is(err, ErrPoolUnavailable) hold.
func (e *UnavailableError) Is(target error) bool { return target == ErrPoolUnavailable }
