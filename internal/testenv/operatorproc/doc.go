// Package operatorproc builds the kobe-operator binary and runs it as a real
// process against the test control plane (package testenv): its own loopback
// ports for the API, metrics and probes, its log in a file, and the signals
// a test needs (SIGTERM to stop, SIGKILL to crash, SIGSTOP to freeze). It
// must only be imported from tests.
package operatorproc
