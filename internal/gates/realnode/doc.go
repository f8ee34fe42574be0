// Package realnode holds the test of the NodesReady probe against a real
// kubelet with containerd (internal/testenv/hostcluster: root, containerd and
// the node binaries). It has no code of its own; the probe is internal/gates.
package realnode
