// Package apiclient is the Go client of kobe's HTTP API (v1): endpoints,
// credentials, the calls and their errors; the JSON types it sends and
// receives live in package wire. It must not depend on the API server, the
// controllers or the CLI.
package apiclient
