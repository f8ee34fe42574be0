// Package operatorproc builds the kobe-operator binary and runs it as a real
// process against the test control plane (package testenv): its own loopback
// ports for the API (over TLS when asked), metrics and probes, its log in a
// file, a restart on the same ports, and the signals a test needs (SIGTERM
// to stop, SIGKILL to crash, SIGSTOP to freeze). It is the one way a test
// starts the operator, and must only be imported from tests.
package operatorproc
