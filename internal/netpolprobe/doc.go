// Package netpolprobe finds out whether the host cluster's CNI enforces
// NetworkPolicy, on which each kubernetes backend member's isolation rests:
// a pure Judge of what probe pods did, and the leader-only Prober that runs
// them in the operator's namespace. It must not decide what a pool does
// with the verdict (internal/pool does).
package netpolprobe
