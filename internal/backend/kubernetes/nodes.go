package kubernetes

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// A node pod is a privileged pod of the host cluster running kobe-node
// (cmd/kobe-node) in "pod mode": containerd, kubelet and kube-proxy in the
// pod's own network, mount and PID namespaces and cgroup, registered to the
// member's API server as the node named after the pod. The member's pods
// run as containers nested in it. Everything it needs is in the node image
// (make image-node) and in its files of the PKI Secret (incluster.NodeDir).
const (
	// admissionFile is the API server's admission configuration in the
	// PKI Secret (Pod Security's defaults); admissionPolicyFile the static
	// admission policies, which the pod sees in admissionPolicyDir under
	// the PKI directory (a directory of its own: the API server loads every
	// manifest of it).
	admissionFile       = "admission.yaml"
	admissionPolicyFile = "pod-security-policy.yaml"
	admissionPolicyDir  = "admission-policies"

	// Paths inside the node image (make image-node).
	nodeBinDir = "/usr/local/bin"
	nodeCNIDir = "/opt/cni/bin"
	// NodePauseArchive is the pause image's archive in the node image;
	// NodePauseImage is its name once imported.
	NodePauseArchive = "/usr/local/share/kobe-node/images/pause.tar"
	NodePauseImage   = "kobe.local/pause:v1"
	// nodeDNSArchive is the cluster DNS image's archive in the node image
	// (clusterdns.Image once imported).
	nodeDNSArchive = "/usr/local/share/kobe-node/images/" + clusterdns.Archive
	// nodeDataDir is kobe-node's Dir: containerd's root and state and
	// kubelet's root, on an emptyDir (containerd's overlay snapshots cannot
	// live on the container's own overlay root).
	nodeDataDir = "/var/lib/kobe-node"
	// nodePath is the node container's PATH (the image sets none):
	// containerd finds the shim and runc on it, kube-proxy and the CNI
	// plugins iptables, kubelet mount.
	nodePath = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// nodePodCIDR is node i's pod range: 198.19.(244+i).0/24, in
// nodeClusterCIDR, in incluster.MemberNetwork (198.19.240.0/20) with the
// member's Service range. Every member uses the same ranges: they exist
// only inside each node pod's network namespace (pods reach anything else
// masqueraded to the node pod's IP).
func nodePodCIDR(i int) string { return fmt.Sprintf("198.19.%d.0/24", 244+i) }

// nodeClusterCIDR holds the pod ranges of a member's (up to 4) nodes.
const nodeClusterCIDR = "198.19.244.0/22"

// memberDNSIP is the cluster DNS address of every member, the same in each
// like the member's Service range: clusterdns.ServiceIP of
// incluster.MemberServiceCIDR (TestMemberDNSIP).
const memberDNSIP = "198.19.240.10"

// nodeEntrypoint prepares the node pod's namespaces, then runs kobe-node:
//
//   - the cgroup hierarchies are mounted again whole (after unmounting the
//     runtime's: the kernel refuses a superblock on its own root): the container runtime
//     mounts only the container's own cgroup at each hierarchy's place
//     (cgroup v1, no cgroup namespace), where kobe-node finds no hierarchy
//     root and kubelet could not follow the paths of /proc/self/cgroup.
//     kubelet's cgroup root is still a child of the node pod's own cgroup;
//   - one rule in the node pod's network namespace: the member's pods'
//     packets for anything outside the member's pod ranges (the member's
//     API server, through the host's Service) leave masqueraded to the node
//     pod's IP, since nothing outside the node pod routes the pod ranges
//     back to it (kobe-node's pod network does not masquerade: local
//     members' hosts route those ranges).
var nodeEntrypoint = strings.Join([]string{
	"set -e",
	`mounts=$(cat /proc/self/mounts)`,
	`echo "$mounts" | while read -r _ dir fs opts _; do case "$fs" in cgroup|cgroup2) umount "$dir"; mount -t "$fs" -o "$opts" "$fs" "$dir";; esac; done`,
	"iptables -w -t nat -A POSTROUTING -s " + nodeClusterCIDR + " ! -d " + nodeClusterCIDR + " -j MASQUERADE",
	// kobe-node runs as a child, so that a node that fails leaves the tails
	// of its daemons' logs in the pod's log (the pod ends Failed, and its
	// emptyDir goes with it); SIGTERM is passed on.
	"set +e",
	nodeBinDir + "/kobe-node --config " + incluster.NodeDir + "/" + incluster.NodeConfigFile + " & pid=$!",
	`trap 'kill -TERM $pid; wait $pid; exit' TERM INT`,
	`wait $pid; rc=$?`,
	`for f in ` + nodeDataDir + `/logs/*.log; do echo "== $f (tail)"; tail -n 20 "$f"; done`,
	`exit $rc`,
}, "\n")

// DefaultNodeImage is the node image of pools that name none:
// ghcr.io/kunobi-ninja/kobe-node tagged with the operator's version.
func DefaultNodeImage() string {
	return NodeRegistry + "/kobe-node:" + version.Version
}

// nodeCount is the member's number of node pods.
func nodeCount(m backend.Member) int {
	if k := spec(m); k != nil {
		return int(ptr.Deref(k.Nodes, 0))
	}
	return 0
}

// defaultNodes is how many node pods a member of a pool with this spec
// gets when the pool leaves nodes unset: d's count (Auto: 1), or none
// when its version would need a node image the pool does not name
// (nodeSkew), which is said rather than failing every member.
func defaultNodes(d backend.NodesDefault, spec *kobev1.ClusterPoolSpec) (int32, string) {
	n := d.Count
	if d.Auto {
		n = 1
	}
	if n == 0 {
		return 0, "this operator's --kubernetes-default-nodes is 0"
	}
	m := backend.Member{Spec: kobev1.ClusterInstanceSpec{Backend: spec.Backend, Cluster: spec.Cluster}}
	if err := nodeSkew(m, int(n)); err != nil {
		return 0, err.Error()
	}
	return n, ""
}

// nodeSkew refuses node pods whose kubelet would be newer than the member's
// API server, which Kubernetes does not support: kobe's node image carries
// the kubelet of version.Kubernetes, so a member of an older minor needs a
// node image of its own version (backend.kubernetes.images.node).
func nodeSkew(m backend.Member, nodes int) error {
	if nodes == 0 {
		return nil
	}
	if k := spec(m); k != nil && k.Images != nil && k.Images.Node != "" {
		return nil // the pool's own node image: its kubelet is the pool's business
	}
	v, err := Version(m)
	if err != nil {
		return err
	}
	if minorOf(v) < minorOf(version.Kubernetes) {
		return fmt.Errorf("spec.cluster.version %s with spec.backend.kubernetes.nodes: kobe's node image runs kubelet %s, newer than the member's API server, which Kubernetes does not support; set spec.backend.kubernetes.images.node to a node image of %s", v, version.Kubernetes, v)
	}
	return nil
}

// minorOf is the minor of an x.y.z version (-1 when there is none).
func minorOf(v string) int {
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "v"), "%d.%d", &major, &minor); err != nil {
		return -1
	}
	return minor
}

// nodeSettings adds the member's node pods to set: their names and each
// one's kobe-node configuration.
func (t Template) nodeSettings(m backend.Member, set *incluster.Settings) error {
	n := nodeCount(m)
	if n > 4 {
		return fmt.Errorf("spec.backend.kubernetes.nodes %d: at most 4", n)
	}
	if err := nodeSkew(m, n); err != nil {
		return err
	}
	share := memberShare(m, n)
	for i := range n {
		name := incluster.NodePodName(m, i)
		c := t.nodeConfig(name, i)
		c.RegistryMirrors = m.Spec.Cluster.MirrorsByRegistry()
		c.PodPidsLimit, c.PidsMax = share.podProcesses, share.processes
		// Its pods together leave kubelet and containerd a reserve.
		pods := node.PodsShare(share.cgroupLimits())
		c.PodsPidsMax, c.PodsMemoryMax = pods.Pids, pods.MemoryBytes
		if err := c.Validate(); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
		b, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			return err
		}
		set.Nodes = append(set.Nodes, name)
		set.NodeConfigs = append(set.NodeConfigs, b)
	}
	return nil
}

// nodeConfig is node i's kobe-node configuration in pod mode: no
// interface (the pod's network as it is), no cgroup parent (kubelet's cgroup
// root under kobe-node's own cgroup), nothing to hide, the member's
// overlay key, with which the node pods of a member route their pod ranges
// to each other (internal/node, overlay.go), and the egress proxy through
// which the member's API server reaches its pods and kubelets (egress.go).
func (t Template) nodeConfig(name string, i int) *node.Config {
	f := func(file string) string { return incluster.NodeDir + "/" + file }
	return &node.Config{
		Name:                name,
		Dir:                 nodeDataDir,
		PodCIDR:             nodePodCIDR(i),
		ClusterCIDR:         nodeClusterCIDR,
		ClusterDNS:          memberDNSIP,
		Containerd:          nodeBinDir + "/containerd",
		Ctr:                 nodeBinDir + "/ctr",
		KubeletBin:          nodeBinDir + "/kubelet",
		KubeProxyBin:        nodeBinDir + "/kube-proxy",
		CNIBinDir:           nodeCNIDir,
		KubeletKubeconfig:   f(incluster.NodeKubeletKubeconfig),
		KubeProxyKubeconfig: f(incluster.NodeKubeProxyKubeconfig),
		KubeletCert:         f(incluster.NodeKubeletCert),
		KubeletKey:          f(incluster.NodeKubeletKey),
		ClientCAFile:        f(incluster.NodeClientCACert),
		OverlayKeyFile:      f(incluster.NodeOverlayKey),
		EgressProxy: &node.EgressProxy{
			Port:         node.EgressProxyPort,
			CertFile:     f(incluster.NodeEgressCert),
			KeyFile:      f(incluster.NodeEgressKey),
			ClientCAFile: f(incluster.NodeEgressCACert),
			ClientName:   membercerts.EgressClientName,
		},
		PauseImage: NodePauseImage,
		Images:     append([]string{NodePauseArchive, nodeDNSArchive}, t.NodePreload...),
	}
}

// nodePods renders the member's node pods.
func (t Template) nodePods(in incluster.RenderInput, img Images) ([]corev1.Pod, error) {
	n := nodeCount(in.Member)
	if n == 0 {
		return nil, nil
	}
	// Inside a node pod, the member's network shadows these addresses: a
	// Service address of the host cluster among them would be unreachable
	// from the node (kubelet could not reach its API server).
	member := netip.MustParsePrefix(incluster.MemberNetwork)
	if ip, err := netip.ParseAddr(in.ClusterIP); err != nil || member.Contains(ip) {
		return nil, fmt.Errorf("spec.backend.kubernetes.nodes: the member's Service address %s lies in %s, which node pods keep for the member's own pods and Services", in.ClusterIP, incluster.MemberNetwork)
	}
	var res *corev1.ResourceRequirements
	if k := spec(in.Member); k != nil && k.Resources != nil {
		res = k.Resources.Node
	}
	share := memberShare(in.Member, n)
	var pods []corev1.Pod
	for i := range n {
		nodeRes := share.cap(incluster.Resources(res, DefaultResources.Node))
		p := corev1.Pod{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:            "node",
				Image:           img.Node,
				ImagePullPolicy: img.PullPolicy,
				Command:         []string{"/bin/sh", "-c", nodeEntrypoint},
				Env:             []corev1.EnvVar{{Name: "PATH", Value: nodePath}},
				Resources:       nodeRes,
				Ports:           []corev1.ContainerPort{{Name: "egress", ContainerPort: node.EgressProxyPort, Protocol: corev1.ProtocolTCP}},
				// Privileged: containerd and runc make namespaces, mounts
				// and cgroups for the member's containers. Root on the host
				// node: see docs/backends.md, "Node pods".
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](0)},
				// kobe-node covers /run, /var/lib and /var/log with tmpfs
				// mounts of its own and binds its Dir back.
				VolumeMounts: []corev1.VolumeMount{
					{Name: incluster.PKIVolume, MountPath: incluster.NodeDir, ReadOnly: true},
					{Name: "data", MountPath: nodeDataDir},
					// runc writes exec's process specs there.
					{Name: "tmp", MountPath: "/tmp"},
				},
			}},
			// The node's disk is its ephemeral-storage limit.
			Volumes: []corev1.Volume{
				emptyDir("data", nodeRes.Limits[corev1.ResourceEphemeralStorage]),
				emptyDir("tmp", tmpSize),
			},
		}}
		p.Name = incluster.NodePodName(in.Member, i)
		p.Labels = map[string]string{incluster.LabelComponent: incluster.ComponentNode}
		pods = append(pods, p)
	}
	return pods, nil
}

// PodSecurityPolicyName is the static admission policy that keeps a
// member's namespaces at its Pod Security level.
const PodSecurityPolicyName = podsecurity.NamespacePolicy
