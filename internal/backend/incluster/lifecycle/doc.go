// Package lifecycle holds the in-cluster backends' tests on the real-node
// host cluster (make test-node): each template, the kubernetes one and a
// minimal one that proves the k3s/k0s seam, goes through the same create,
// observe, reap and delete cycle, and the sweep is checked on real objects.
// It has no code of its own; it is a package so that the fast test layers
// of incluster and kubernetes stay free of the host cluster.
package lifecycle
