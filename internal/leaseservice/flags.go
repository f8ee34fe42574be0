package leaseservice

import (
	"errors"
	"flag"
	"math"
)

// Flags are the operator's flags of the lease service's limits.
type Flags struct {
	// MaxQueuedPerOwner is Options.MaxQueuedPerOwner.
	MaxQueuedPerOwner int
}

// Bind registers the flags on fs with their defaults.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.IntVar(&f.MaxQueuedPerOwner, "max-queued-per-owner", DefaultMaxQueuedPerOwner, "Most leases one caller (policy and identity) may have waiting for a member when its AccessPolicy rule sets no maxConcurrentLeases; beyond it the API answers 429 QueuedLeaseLimit.")
}

// Validate refuses values the operator must not start with.
func (f Flags) Validate() error {
	if f.MaxQueuedPerOwner <= 0 || f.MaxQueuedPerOwner > math.MaxInt32 {
		return errors.New("--max-queued-per-owner must be a positive number")
	}
	return nil
}
