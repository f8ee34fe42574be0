// Package incluster runs kobe end to end with members inside a host
// cluster: the real-node host (internal/testenv/hostcluster: kubelet,
// containerd, kube-proxy), the kobe-operator binary on the machine with the
// kubernetes backend, whose members are control-plane pods of locally built
// upstream-named images, the lease API over TLS, the kobe CLI, and kubectl
// through the connect proxy with the kubeconfig a lease returned.
//
// It needs root (the node) and `make test-node`'s builds: the control
// plane, the node, the pause and control-plane images, and bin/kobe.
package incluster
