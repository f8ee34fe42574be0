// Package soak is `make soak`: a chaos soak of two kobe-operator replicas
// (--leader-elect, sim backend) against the real test control plane, with
// 16 clients leasing and releasing through the HTTP API while a replica is
// SIGKILLed, the leader SIGSTOPped or kube-apiserver restarted every 30 s.
//
// check.go holds what decides: Checker turns a sequence of observations
// (members and leases as the API server shows them, what clients were told,
// whether a leader renews) into violations, and is table-tested without any
// process. The harness (TestSoak, build tag soak, never in `make test` or
// CI) only runs things and feeds it; report.go renders its figures into
// docs/benchmarks.md.
package soak
