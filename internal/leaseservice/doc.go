// Package leaseservice is what a caller of kobe's API may do with leases and
// pools: create a lease (binding it at once when a member is free), read,
// list, extend and release its own leases, and read the pools it may use,
// each authorised for an auth.Principal before anything is read. It works
// with Kubernetes objects and sentinel errors and knows nothing of HTTP; it
// must not import a controller (lease transitions come from package lease).
package leaseservice
