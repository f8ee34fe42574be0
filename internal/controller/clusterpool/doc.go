// Package clusterpool holds the ClusterPool controller: it creates and
// deletes a pool's ClusterInstances as internal/pool decides, reports the
// pool's counters and conditions, and removes unbound members when the pool
// is deleted. Building and destroying members belongs to the clusterinstance
// controller.
package clusterpool
