// Package apiserver is kobe's HTTP API (/v1/leases, /v1/pools, /v1/status),
// embedded in the operator as a manager.Runnable that every replica serves.
// Middleware authenticates each request once (package auth) and bounds its
// body and the requests in flight; handlers decode, make one call to the
// lease service (package leaseservice) and encode. Nothing here reconciles,
// decides a lease's fate or imports a controller.
package apiserver
