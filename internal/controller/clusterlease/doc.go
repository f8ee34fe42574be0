// Package clusterlease reconciles ClusterLeases: it binds queued leases to
// Ready members in first-come-first-served order, repairs binds interrupted
// by a crash, ends leases at their expiry or queue timeout, and deletes
// ended leases after a retention period.
//
// It decides nothing itself that package lease (queue order, expiry, how a
// lease ends) or package binding (the fenced bind protocol) already does,
// and it never destroys a member: that is the instance controller's job.
package clusterlease
