// Package ha tests kobe with two replicas: two real kobe-operator processes
// (the tree's cmd/kobe-operator, built once per run) with --leader-elect,
// --enable-sim-backend and short leader-election timings, serving one
// namespace of a real test API server (internal/testenv), with a token
// AccessPolicy. Only the leader reconciles; both serve the lease API.
//
// How to write a test here:
//
//	c := startCluster(t, clusterOptions{})      // a namespace, its policies, replicas r0 and r1
//	c.createSimPool(t, "sim", 8, 0)             // a sim pool of 8 members
//	c.waitPoolReady(t, "sim", 8)
//	code, body := c.call(t, 1, "POST", "/v1/leases", c.token, wire.CreateLeaseRequest{Pool: "sim"})
//	lead, follow := c.leader(t)                 // which replica leads, once one does
//	c.replica(lead).Kill()                      // SIGKILL, as a crash; Stop for SIGTERM, Freeze/Thaw for SIGSTOP/SIGCONT
//	c.start(t, lead); c.waitServing(t, lead)    // start that slot again, as a Deployment would
//
// clusterOptions adds token policies (policies), extra flags for both
// replicas (args) and other leader-election timings. Each replica runs from
// a symlink named after it (kobe-operator-r0, -r1), so the API server's
// managedFields tell which replica wrote what (replicaWrites). Logs are in a
// temporary directory, printed in part when a test fails; with
// KOBE_HA_LOG_DIR set they are kept there, one directory per test. The package
// runs in `make test-heavy` with -p 1: tests here must not use t.Parallel, and
// should keep to a few minutes in all on a 2-core machine.
package ha
