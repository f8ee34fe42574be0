// Package local implements the "local" backend: every member is a real
// Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager and,
// with scheduling, kube-scheduler and kwok) run as processes on the operator's
// host, one data directory per member.
//
// Everything the backend knows about a member lives in that directory (a
// state file, certificates, keys, logs), so a restarted operator re-adopts
// running members; nothing about other backends or the operator's API
// objects belongs here.
package local
