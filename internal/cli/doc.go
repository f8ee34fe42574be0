// Package cli holds the cobra commands of the kobe CLI, one kubectl-style
// Options{Complete, Validate, Run} per command, over internal/apiclient. It
// must not reach the cluster or the operator except through the HTTP API.
package cli
