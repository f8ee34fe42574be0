package kubernetes

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// TestMemberLimitsShareTheNodes: a member's cluster.limits are split
// between its node pods, as their containers' limits (never above what
// the pool's own resources ask) and their kobe-node configurations.
func TestMemberLimitsShareTheNodes(t *testing.T) {
	for _, tc := range []struct {
		name               string
		node               *corev1.ResourceRequirements
		wantMem, wantDisk  string
		wantPids, wantNode int64
	}{
		{name: "the defaults above the share", wantMem: "1536Mi", wantDisk: "4Gi", wantPids: 512, wantNode: 2048},
		{name: "the pool asks for less than the share", node: &corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("2Gi")}},
			wantMem: "1Gi", wantDisk: "2Gi", wantPids: 512, wantNode: 2048},
		{name: "the pool asks for more than the share", node: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}},
			wantMem: "1536Mi", wantDisk: "4Gi", wantPids: 512, wantNode: 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := member("", &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](2), Resources: &kobev1.KubernetesResources{Node: tc.node}})
			m.Spec.Cluster.Limits = &kobev1.MemberLimits{Memory: ptr.To(resource.MustParse("3Gi")), Disk: ptr.To(resource.MustParse("8Gi")),
				Processes: ptr.To[int64](4096), PodProcesses: ptr.To[int64](512)}
			pods, err := Template{}.Pods(incluster.RenderInput{Member: m, ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: "/pki"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods[1:] {
				r := p.Spec.Containers[0].Resources
				mem, disk := r.Limits[corev1.ResourceMemory], r.Limits[corev1.ResourceEphemeralStorage]
				if mem.String() != tc.wantMem || disk.String() != tc.wantDisk {
					t.Errorf("%s: memory %s, disk %s; want %s, %s", p.Name, mem.String(), disk.String(), tc.wantMem, tc.wantDisk)
				}
				if req := r.Requests[corev1.ResourceMemory]; req.Cmp(mem) > 0 {
					t.Errorf("%s: memory request %s above its limit %s", p.Name, req.String(), mem.String())
				}
				for _, v := range p.Spec.Volumes {
					if v.Name == "data" && v.EmptyDir.SizeLimit.String() != tc.wantDisk {
						t.Errorf("%s: the data emptyDir holds %s", p.Name, v.EmptyDir.SizeLimit.String())
					}
				}
			}
			set, err := Template{}.Settings(m)
			if err != nil {
				t.Fatal(err)
			}
			for _, raw := range set.NodeConfigs {
				var c node.Config
				if err := json.Unmarshal(raw, &c); err != nil {
					t.Fatal(err)
				}
				if c.PodPidsLimit != tc.wantPids || c.PidsMax != tc.wantNode {
					t.Errorf("%s: podPidsLimit %d, pidsMax %d; want %d, %d", c.Name, c.PodPidsLimit, c.PidsMax, tc.wantPids, tc.wantNode)
				}
			}
		})
	}
	// No limits: the pods and configurations as before.
	m := member("", &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](1)})
	pods, err := Template{}.Pods(incluster.RenderInput{Member: m, ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: "/pki"})
	if err != nil {
		t.Fatal(err)
	}
	if mem := pods[1].Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; mem.String() != "2Gi" {
		t.Errorf("without limits the node's memory is %s, want the default 2Gi", mem.String())
	}
}
