// Package lease is the lease domain: the pure decisions and transitions of a
// ClusterLease's life (queue order and position, whether a member may be
// bound to it, whether it is active, when and why it ends, how it is ended
// or extended), applied to objects in memory with the current time passed
// in.
//
// Nothing here talks to the API server, reads a clock or logs: callers (the
// lease controller, the HTTP API) read the objects, call these functions and
// persist the result with a write fenced by resourceVersion.
package lease
