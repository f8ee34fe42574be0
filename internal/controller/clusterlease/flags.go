package clusterlease

import (
	"flag"
	"time"
)

// Flags are the operator's flags of how long the lease controller keeps
// what a lease leaves behind.
type Flags struct {
	// Retention and AuditRetention are the Reconciler's fields of the same
	// names; AuditRetention is the AuditJanitor's Retention too.
	Retention, AuditRetention time.Duration
}

// Bind registers the flags on fs with their defaults.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.DurationVar(&f.Retention, "lease-retention", time.Hour, "How long ended leases are kept before deletion.")
	fs.DurationVar(&f.AuditRetention, "audit-retention", DefaultAuditRetention, "How long the audit record of a lease that held a member (in a ConfigMap kobe-audit-<second>-<pool hash> shared by the leases of a pool that ended in the same second: who held which member, from when to when, under which policy; kobe admin audit finds it) is kept; it outlives the lease.")
}

// Validate refuses nothing: the operator has always taken any retention
// (an audit retention of zero or less is DefaultAuditRetention).
func (f Flags) Validate() error { return nil }
