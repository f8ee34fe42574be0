// Package cleanup is the proof side of a lease's cleanupMode
// VerifiedDestroy: the receipt of a member's teardown (every recorded
// resource and whether it was proven absent), kept in a ConfigMap past the
// member and its lease, the backoff of a Quarantined member's retries, and
// the collector that deletes receipts after their retention.
package cleanup
