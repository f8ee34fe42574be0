// Package clusterlease reconciles ClusterLeases: it binds queued leases to
// Ready members in first-come-first-served order, records on the lease a
// bind its member already names (the API answered it, then its status copy
// was lost), drops a lease status that names a member not naming the lease
// back and recycles that member (a forged status), ends leases at their
// expiry or queue timeout, and deletes ended leases after a retention
// period. It binds only leases marked Pending or past lease.InFlightGrace,
// so never one the API's fast path may still be claiming a member for.
//
// It decides nothing itself that package lease (queue order, expiry, how a
// lease ends) or package binding (the fenced bind protocol) already does,
// and it never destroys a member: it deletes one that a forged status names,
// and the instance controller destroys it.
package clusterlease
