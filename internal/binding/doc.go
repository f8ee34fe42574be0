// Package binding binds a ClusterLease to one Ready ClusterInstance. It is
// the only place that claims a member, and it is fenced so that no member
// ever serves two leases, across goroutines, operator replicas and crashes.
// It does not decide queue order, expiry or whether a member may be bound
// (package lease: Bindable, ServesCleanup) and it writes no lease: it serves
// both the HTTP API's fast path and the lease controller, which record the
// bind on the lease afterwards. The record of a bind is read and written in
// memory by record.go; binding.go holds the Binder, which talks to the API
// server.
//
// Protocol. The member's write-once spec.leaseRef {name, uid, boundAt} is
// the record of a bind; the lease's status (phase Bound, instanceRef,
// boundAt, expiresAt = boundAt + ttl) is a copy of it, written later.
//  1. Claim the member: one Update of a Ready member that no lease's status
//     names (index.LeaseInstanceUID), fenced by its resourceVersion, setting
//     spec.leaseRef, the lease label and the lease as controller owner. Only
//     one lease per member gets past this write (the CRD makes leaseRef
//     write-once), and its successful answer is the live confirmation of
//     the bind.
//  2. Copy the bind onto the lease (RecordBound, fenced by the lease's
//     resourceVersion). Nothing depends on this write for safety: a lease
//     whose copy is missing is found from its member (lease label, then
//     Names), by the API and by the lease controller.
//
// Why it holds:
//   - A credential is minted only for a member whose leaseRef, read live (or
//     returned by the claim itself), names the lease's UID. A caller who
//     hangs up between or during the writes cannot end with a credential for
//     a member that does not name its lease: there is no earlier write that
//     points anywhere.
//   - One lease, one member: a binder claims members for a lease one at a
//     time and stops at the first write whose outcome it cannot know
//     (ErrUncertain); the API's fast path claims only for the lease it just
//     created, within a budget shorter than lease.InFlightGrace, and the
//     lease controller claims only for leases past that grace or marked
//     Pending, after a live look for a member that already names them. A
//     claim the API server applies after its client gave up can still, in
//     theory, give a lease a second member: Record refuses to pick between
//     two, the controller records the earliest (Elect), and the instance
//     controller recycles any member whose lease's status names another.
//   - A lease that ends, or is deleted, sends every member naming it to
//     Recycling (the instance controller). A member named by a lease's status
//     that does not name the lease back (a forged or stale status) is never
//     handed out: Bind skips it and the lease controller recycles it.
//
// A failed Bind says whether it lost a race (LostRace: retry soon with fresh
// objects), may have written (ErrUncertain: look before binding again), or
// the API server refused a write (the error carries why).
package binding
