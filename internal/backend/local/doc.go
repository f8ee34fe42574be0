// Package local implements the "local" backend: every member is a real
// Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager and,
// with scheduling, kube-scheduler and kwok) run as processes on the operator's
// host, one data directory per member. With backend.local.nodes a member also
// runs kube-scheduler and real nodes: one kobe-node process each
// (internal/node) in its own network and mount namespaces and its own cgroup,
// on the member's bridge in a network slot of the host; the member's API
// server then listens on that bridge. Every member's API server enforces Pod
// Security at the pool's cluster.podSecurity level.
//
// Everything the backend knows about a member lives in that directory (a
// state file, certificates, keys, logs), so a restarted operator re-adopts
// running members; nothing about other backends or the operator's API
// objects belongs here.
package local
