// Package kubernetes is the kubernetes backend: each member's control plane
// is upstream etcd, kube-apiserver and kube-controller-manager in one pod of
// the host cluster, built by the shared in-cluster machinery
// (internal/backend/incluster). This package is only the pod template and
// its defaults (images, resources, version); it must not create objects
// itself.
package kubernetes
