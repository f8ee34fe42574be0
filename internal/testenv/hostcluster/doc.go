// Package hostcluster starts a real single-node Kubernetes cluster on this
// machine for tests: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler (hack/build-controlplane.sh), containerd and runc from
// Debian, kubelet and kube-proxy (hack/build-node.sh), a CNI bridge, and the
// routes that keep its pod and Service ranges on the machine; and tears all
// of it down again (Teardown, which also runs before every start), leaving
// the machine as a Snapshot found it. It needs root and must only be used
// from tests; docs/host-cluster.md says what it changes and why.
package hostcluster
