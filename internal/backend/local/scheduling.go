package local

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// With spec.backend.local.scheduling a member also runs kube-scheduler and
// kwok, and gets one simulated node that kwok keeps Ready, so that pods are
// scheduled and reported Running without a kubelet.
const (
	// kwokStagesDir, under BinDir, holds kwok's Stage definitions (the YAML
	// files of sigs.k8s.io/kwok's kustomize/stage/node/fast and
	// kustomize/stage/pod/fast, copied there by hack/build-controlplane.sh).
	// kwok does not start without them.
	kwokStagesDir = "kwok-stages"
	// fakeNodeAnnotation marks the nodes kwok manages.
	fakeNodeAnnotation = "kwok.x-k8s.io/node"
	// FakeNodeName is the simulated node of a member with scheduling.
	FakeNodeName = "kwok-node-0"
)

// The addresses kwok gives the simulated node and its pods: inside the
// benchmark range, beside the node networks (internal/node) and used by no
// member, so the address guard can admit them while nothing answers there.
var (
	kwokPodCIDR = netip.MustParsePrefix("198.19.224.0/24")
	kwokNodeIP  = netip.MustParseAddr("198.19.225.1")
)

// kwokStages lists the Stage files kwok is started with, beside the
// binaries of Kubernetes version v.
func (b *Backend) kwokStages(v string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(b.binDir(v), kwokStagesDir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	return files, nil
}

func (b *Backend) kwokArgs(p paths, st *state) ([]string, error) {
	stages, err := b.kwokStages(st.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + p.kubeconfig(compKwok),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + fakeNodeAnnotation + "=fake",
		// No kwok server (port forwarding, logs, exec): nothing to clash.
		"--node-port=0",
		"--server-address=",
		"--cidr=" + kwokPodCIDR.String(),
		"--node-ip=" + kwokNodeIP.String(),
	}
	for _, f := range stages {
		args = append(args, "--config="+f)
	}
	return args, nil
}

// checkKwokStages is part of checkBinaries for members with scheduling.
func (b *Backend) checkKwokStages(v string) error {
	stages, err := b.kwokStages(v)
	if err != nil {
		return err
	}
	if len(stages) == 0 {
		return fmt.Errorf("no kwok Stage files in %s", filepath.Join(b.binDir(v), kwokStagesDir))
	}
	return nil
}

// createFakeNode creates the member's simulated node; kwok makes it Ready.
func (b *Backend) createFakeNode(ctx context.Context, p paths, st *state) error {
	acc, err := access(p, localURL(st.LocalHost, st.APIServerPort))
	if err != nil {
		return err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(acc.adminKubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = probeTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        FakeNodeName,
			Annotations: map[string]string{fakeNodeAnnotation: "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{
				"type":                   "kwok",
				"kubernetes.io/hostname": FakeNodeName,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"kubernetes.io/role":     "agent",
			},
		},
		Status: corev1.NodeStatus{
			Allocatable: fakeNodeResources(),
			Capacity:    fakeNodeResources(),
		},
	}
	_, err = cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func fakeNodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}
