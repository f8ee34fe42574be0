// Package leaseservice is what a caller of kobe's API may do with leases and
// pools: create a lease (binding it at once when a member is free), read,
// list, extend and release its own leases, and read the pools it may use,
// each authorised for an auth.Principal before anything is read. It works
// with Kubernetes objects and sentinel errors; a refused lease request is a
// Refusal, which also carries the HTTP API's answer to it (as an admission
// response carries a metav1.Status), and that is all it knows of HTTP. It
// must not import a controller (lease transitions come from package lease).
// A lease request is admitted by a pure chain of checks (admission.go) over
// what was read before, then against its caller's ledger.
//
// A kubeconfig is minted only for a member whose write-once leaseRef names
// the lease's UID, read live (or returned by the member's claim itself), for
// a lease that has not ended, from access material sealed for that member's
// UID (memberaccess). A
// hand-out costs two API writes before its answer (the lease, the member's
// claim; package binding), three when the caller has a limit or asks for an
// alias (its ledger, which keeps limits exact across replicas: ledger.go);
// the lease's status copy, Events and metrics follow the answer through
// Options.Defer.
package leaseservice
