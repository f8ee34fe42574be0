// Package chart tests the Helm chart charts/kobe: helm lint, and its
// templates rendered with Helm as a library (defaults, every optional value,
// the combinations the chart refuses, values that fail values.schema.json).
//
// It is a module of its own so that Helm's dependencies (oras, kubectl,
// kustomize) stay out of kobe's go.mod; `make test-chart` runs it.
package chart
