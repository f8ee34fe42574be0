package contract

import (
	"github.com/kunobi-ninja/kobe/internal/apiclient"
)

// Target is a running API server prepared for the suite. Every pool it
// names exists (except MissingPool) before Run is called, and only the
// suite leases from them.
type Target struct {
	// URL is the API's base URL, e.g. "http://127.0.0.1:8080".
	URL string

	// Allowed and Other are two identities that may use every pool below.
	Allowed, Other apiclient.Credentials
	// Limited may use the pools too, but holds at most one active lease.
	Limited apiclient.Credentials
	// Denied authenticates but may use none of the pools below, nor
	// MissingPool.
	Denied apiclient.Credentials
	// Invalid are credentials the server rejects (a wrong token).
	Invalid apiclient.Credentials

	// ReadyPool has enough Ready members for the suite (at least 12), so a
	// lease is Bound at once.
	ReadyPool string
	// EmptyPool has no member and none ready soon: a lease waits in its
	// queue (the suite's leases there never bind).
	EmptyPool string
	// DeletingPool is being deleted.
	DeletingPool string
	// UnavailablePool's backend cannot create members (condition Capacity
	// False, reason BackendUnavailable).
	UnavailablePool string
	// QuarantinedPool is at its member cap with every member Quarantined.
	QuarantinedPool string
	// MissingPool is a pool name Allowed and Other may use but no pool has.
	MissingPool string

	// MaxExtensions is how many extensions a lease of Allowed may take.
	MaxExtensions int
	// MaxBodyBytes is the server's request body limit.
	MaxBodyBytes int
	// MaxQueuedPerOwner is how many leases Other (whose policy sets no
	// maxConcurrentLeases) may have waiting; 0 means the server's
	// default, 10.
	MaxQueuedPerOwner int
}
