// Package wire holds the JSON types of kobe's HTTP API (v1): the lease, pool
// and status objects, request and response bodies, the error body with its
// machine-readable reasons, and the rules for lease ids and aliases. The API
// server encodes them and the Go client decodes them; it must import nothing
// of kobe and hold no behaviour beyond formatting and validating wire values.
package wire
