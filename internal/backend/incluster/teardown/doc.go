// Package teardown holds the in-cluster machinery's tests against a real
// API server without nodes (internal/testenv): the order in which Delete and
// Sweep remove a member's objects, which keeps a member's pods under their
// NetworkPolicy until the last of them is gone. It has no code of its own;
// the tests that need a kubelet are in lifecycle (the real-node layer).
package teardown
