//go:build tools

// etcdctl is built beside etcd (hack/build-controlplane.sh) for the etcd
// image of the kubernetes backend's tests: the NetworkPolicy enforcement
// probe's clients run it.
package main

import _ "go.etcd.io/etcd/etcdctl/v3"
