// Package apiclient is the Go client of kobe's HTTP API (v1) and the home of
// its wire types, which the API server encodes and the CLI decodes. It must
// not depend on the API server, the controllers or the CLI.
package apiclient
