// Package bench is `make bench`: it measures the real kobe-operator binary
// (bin/kobe-operator, sim backend) through its real HTTP API against a real
// kube-apiserver and etcd, and writes docs/benchmarks.md and
// docs/benchmarks.json. It holds only the harness (TestBench, run by the
// Makefile), never tests that `make test` runs: hack/test-packages.sh leaves
// it out of every test layer.
package bench
