// Package testenv is kobe's test kit: a real kube-apiserver and etcd (built
// from Go modules by hack/build-controlplane.sh) with kobe's CRDs installed,
// a controller-runtime manager over it, and Eventually for waits with a
// deadline; subpackages hold a fake OIDC issuer and readers of a local
// member's processes. It must only be imported from tests, and holds no
// assertion about kobe itself.
package testenv
