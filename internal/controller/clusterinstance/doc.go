// Package clusterinstance holds the ClusterInstance controller: it builds a
// pool member through its backend, seals its access material into its
// status, runs its
// readiness gates and health probes, notices when its lease ends, and
// destroys it; plus the start-up sweep of members nobody owns. Pool-level
// decisions belong to internal/pool and the clusterpool controller.
package clusterinstance
