// Package contract is the HTTP API v1 contract as one table of cases (route,
// condition, status, reason, JSON shape) and a runner that checks a live
// server against it; the real API server's tests and the Go client's fake
// (apiclienttest) both run it, so the two cannot drift. It depends only on
// the wire types and the client's credentials, never on either server.
package contract
