// Package testenv is kobe's test kit: a real kube-apiserver and etcd (built
// from Go modules by hack/build-controlplane.sh) with kobe's CRDs installed,
// one per package shared by its tests (Shared, Main) or one of a test's own
// (Start), a controller-runtime manager over it, Eventually for waits with a
// deadline, Consistently for windows in which nothing may happen, and
// kubectl; subpackages hold a fake OIDC issuer, readers of a local member's
// processes and the operator as a process (operatorproc). It must only be
// imported from tests, and holds no assertion about kobe itself.
package testenv
