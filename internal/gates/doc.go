// Package gates evaluates the readiness gates a pool member must pass before
// it is Ready, and the health probe of Ready members. Built-in gates talk to
// the member's API server with its admin kubeconfig; any other gate is a
// condition something else sets on the ClusterInstance. The gate names and
// which gates apply to a pool are API values in api/v1alpha1 (gates.go); this
// package only evaluates them and must not import controllers or backends.
package gates
