// Package binding binds a ClusterLease to one Ready ClusterInstance. It is
// the only place that writes a binding, and it is fenced so that neither two
// leases share a member nor one lease holds two, across goroutines, operator
// replicas and crashes. It does not decide queue order or expiry (package
// lease does) and it serves both the HTTP API's fast path and the lease
// controller.
//
// Protocol (each write carries the resourceVersion it was based on):
//  1. claim the lease: status.phase=Bound, instanceRef, boundAt, expiresAt.
//     Only one binder per lease gets past this write.
//  2. claim the member: spec.leaseRef, lease label, controller owner = lease.
//     Only one lease per member gets past this write (leaseRef is write-once
//     in the CRD).
//  3. if 2 fails, roll 1 back to Pending and try another member.
//
// A crash between 1 and 2 leaves a lease that points at a member that does
// not point back; the lease controller completes or rolls back such a bind
// after a grace period (internal/controller/clusterlease, checkMember).
//
// A failed Bind says whether it lost a race (LostRace: retry soon with fresh
// objects) or the API server refused a write (the error carries why).
package binding
