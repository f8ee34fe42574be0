// Package pool decides what a ClusterPool needs: which members to create and
// delete, its counters, phase and conditions, from the pool, its members, its
// queue, the wired backends' capabilities and the time. It is pure (no
// client, no clock of its own, nothing that imports client-go or
// controller-runtime) so every decision is table-tested; talking to the API
// server belongs to the clusterpool controller.
package pool
