package kubernetes

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
)

const (
	// DefaultVersion is the Kubernetes version of a member whose pool sets
	// no cluster.version (hack/versions.sh kubernetes).
	DefaultVersion = "1.37.2"
	// DefaultEtcdImage is etcd's image unless the pool names one; it is the
	// etcd release kubeadm pairs with DefaultVersion.
	DefaultEtcdImage = "registry.k8s.io/etcd:3.6.16-0"
	// DefaultRegistry holds the default kube-apiserver and
	// kube-controller-manager images, tagged v<version>.
	DefaultRegistry = "registry.k8s.io"
	// APIPort is the member API server's port (pod and Service).
	APIPort int32 = 6443
	// BinDir is where every image must have its binary.
	BinDir = "/usr/local/bin"

	// NodeRegistry holds the default node image, kobe-node, tagged with
	// the operator's version (the operator image's registry).
	NodeRegistry = "ghcr.io/kunobi-ninja"

	etcdClientURL = "https://127.0.0.1:2379"
	etcdPeerURL   = "http://127.0.0.1:2380"
	saIssuer      = "https://kubernetes.default.svc.cluster.local"
)

// versionRE is a full release version, with or without a leading v.
var versionRE = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// Disk: whatever a member writes lands on the host node's disk, where the
// host kubelet evicts every tenant's pods under DiskPressure. So every
// emptyDir has a sizeLimit and every container an ephemeral-storage limit
// (for the pod, kubelet also holds the sum of its emptyDirs, writable
// layers and logs to the sum of the containers' limits).
var (
	// etcdQuota is etcd's --quota-backend-bytes (etcd's own default, made
	// explicit): past it etcd refuses writes instead of growing.
	etcdQuota = resource.MustParse("2Gi")
	// etcdDataSize bounds etcd's data directory: the database (at most the
	// quota) plus its write-ahead log and snapshots (5 of each are kept).
	etcdDataSize = resource.MustParse("3Gi")
	// tmpSize bounds the control plane's and node pods' /tmp.
	tmpSize = resource.MustParse("64Mi")
)

// DefaultResources are each component's requests and limits where the pool
// sets none (resources fills in what a pool's partial setting lacks). A
// control-plane container's ephemeral storage is its logs and writable
// layer; etcd's covers its data directory too.
var DefaultResources = struct {
	Etcd, APIServer, ControllerManager, Scheduler, Node corev1.ResourceRequirements
}{
	Etcd:              requirements("50m", "64Mi", "1", "512Mi", "256Mi", plus(etcdDataSize, "256Mi")),
	APIServer:         requirements("100m", "256Mi", "2", "1Gi", "64Mi", "256Mi"),
	ControllerManager: requirements("50m", "64Mi", "1", "512Mi", "64Mi", "256Mi"),
	// Scheduler runs only in members with nodes.
	Scheduler: requirements("50m", "64Mi", "1", "512Mi", "64Mi", "256Mi"),
	// Node is a whole node pod: kubelet, containerd, kube-proxy and every
	// container of the member's workload scheduled on it. Its
	// ephemeral-storage limit is the node's disk: images, containers'
	// writable layers and the member's emptyDirs (its data emptyDir gets
	// the same sizeLimit).
	Node: requirements("100m", "256Mi", "2", "2Gi", "1Gi", "10Gi"),
}

func requirements(cpuReq, memReq, cpuLim, memLim, diskReq, diskLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse(memReq),
			corev1.ResourceEphemeralStorage: resource.MustParse(diskReq),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse(memLim),
			corev1.ResourceEphemeralStorage: resource.MustParse(diskLim),
		},
	}
}

// plus is q + more, as a quantity string.
func plus(q resource.Quantity, more string) string {
	q = q.DeepCopy()
	q.Add(resource.MustParse(more))
	return q.String()
}

// emptyDir is an emptyDir volume of at most size.
func emptyDir(name string, size resource.Quantity) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(size.DeepCopy())}}}
}

// Template renders one pod per member: etcd, kube-apiserver and
// kube-controller-manager, talking over the pod's loopback; and, when the
// pool asks for nodes, one privileged node pod per node (nodes.go).
type Template struct {
	// NodeImage is the node image of pools that name none
	// (DefaultNodeImage when empty).
	NodeImage string
	// NodePreload are image archives inside the node image that every
	// node imports at start, besides the pause image (NodePauseArchive).
	NodePreload []string
}

var _ incluster.Template = Template{}

// Version returns the member's Kubernetes version without a leading v:
// DefaultVersion when unset, an error naming the field when it is not a
// full x.y.z release.
func Version(m backend.Member) (string, error) {
	v := m.Spec.Cluster.Version
	if v == "" {
		return DefaultVersion, nil
	}
	if !versionRE.MatchString(v) {
		return "", fmt.Errorf("spec.cluster.version %q: the kubernetes backend needs a full release version such as %s (x.y.z, the tag of the upstream images)", v, DefaultVersion)
	}
	return strings.TrimPrefix(v, "v"), nil
}

// Images are the images and pull policy a member's pod uses.
type Images struct {
	Etcd, APIServer, ControllerManager, Scheduler, Node string
	PullPolicy                                          corev1.PullPolicy
}

// ImagesFor resolves a member's images: the pool's, else the upstream ones
// of its version (and DefaultNodeImage for nodes).
func ImagesFor(m backend.Member) (Images, error) {
	return Template{}.imagesFor(m)
}

func (t Template) imagesFor(m backend.Member) (Images, error) {
	v, err := Version(m)
	if err != nil {
		return Images{}, err
	}
	img := Images{
		Etcd:              DefaultEtcdImage,
		APIServer:         DefaultRegistry + "/kube-apiserver:v" + v,
		ControllerManager: DefaultRegistry + "/kube-controller-manager:v" + v,
		Scheduler:         DefaultRegistry + "/kube-scheduler:v" + v,
		Node:              or(t.NodeImage, DefaultNodeImage()),
		PullPolicy:        corev1.PullIfNotPresent,
	}
	if k := spec(m); k != nil && k.Images != nil {
		i := k.Images
		img.Etcd = or(i.Etcd, img.Etcd)
		img.APIServer = or(i.APIServer, img.APIServer)
		img.ControllerManager = or(i.ControllerManager, img.ControllerManager)
		img.Node = or(i.Node, img.Node)
		if i.APIServer != "" {
			img.Scheduler = schedulerImage(i.APIServer, v)
		}
		if i.PullPolicy != "" {
			img.PullPolicy = i.PullPolicy
		}
	}
	return img, nil
}

func spec(m backend.Member) *kobev1.KubernetesBackendSpec { return m.Spec.Backend.Kubernetes }

// schedulerImage follows a pool's kube-apiserver image to its mirror: the
// same repository path with kube-scheduler for kube-apiserver, else the
// upstream image (there is no images.scheduler field).
func schedulerImage(apiServer, version string) string {
	repo, _, _ := strings.Cut(apiServer, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	if dir, name := path.Split(repo); name == "kube-apiserver" {
		return dir + "kube-scheduler:v" + version
	}
	return DefaultRegistry + "/kube-scheduler:v" + version
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Settings implements incluster.Template. One server per member: etcd lives
// in the pod, so a second server would need an etcd cluster across pods.
// The API server's admission configuration (Pod Security) is a file of the
// PKI Secret; with nodes, so are each node's kobe-node configuration and
// credentials.
func (t Template) Settings(m backend.Member) (incluster.Settings, error) {
	v, err := Version(m)
	if err != nil {
		return incluster.Settings{}, err
	}
	if _, err := podsecurity.APIServerFlags(v); err != nil {
		return incluster.Settings{}, fmt.Errorf("spec.cluster.version: %w", err)
	}
	if s := m.Spec.Cluster.Servers; s != nil && *s > 1 {
		return incluster.Settings{}, fmt.Errorf("spec.cluster.servers %d: the kubernetes backend runs one server per member", *s)
	}
	// A member with nodes runs its pods nested in privileged node pods: a
	// pod that Pod Security baseline forbids is root on the host's node.
	admission, policy, err := podsecurity.Render(m.Spec.Cluster, path.Join(incluster.PKIDir, admissionPolicyDir))
	if err != nil {
		return incluster.Settings{}, err
	}
	withNodes := nodeCount(m) > 0
	set := incluster.Settings{
		APIPort: APIPort,
		PKI:     incluster.PKINeeds{Etcd: true, ControllerManager: true, KubeletClient: true, Scheduler: withNodes, Egress: withNodes},
		Files:   map[string][]byte{admissionFile: admission},
	}
	if withNodes {
		if set.Files[egressSelectorFile], err = egressSelectorConfig(incluster.PKIDir); err != nil {
			return incluster.Settings{}, err
		}
	}
	if policy != nil {
		set.Files[admissionPolicyFile] = policy
		set.FilePaths = map[string]string{admissionPolicyFile: path.Join(admissionPolicyDir, podsecurity.PolicyFile)}
	}
	if k := spec(m); k != nil {
		set.Placement = k.Placement
	}
	if err := t.nodeSettings(m, &set); err != nil {
		return incluster.Settings{}, err
	}
	return set, nil
}

// Pods implements incluster.Template.
func (t Template) Pods(in incluster.RenderInput) ([]corev1.Pod, error) {
	img, err := t.imagesFor(in.Member)
	if err != nil {
		return nil, err
	}
	v, err := Version(in.Member)
	if err != nil {
		return nil, err
	}
	versionFlags, err := podsecurity.APIServerFlags(v)
	if err != nil {
		return nil, fmt.Errorf("spec.cluster.version: %w", err)
	}
	var res kobev1.KubernetesResources
	if k := spec(in.Member); k != nil && k.Resources != nil {
		res = *k.Resources
	}
	pki := func(key string) string { return path.Join(in.PKIDir, key) }
	mounts := []corev1.VolumeMount{{Name: incluster.PKIVolume, MountPath: in.PKIDir, ReadOnly: true}}
	etcd := corev1.Container{
		Name:            "etcd",
		Image:           img.Etcd,
		ImagePullPolicy: img.PullPolicy,
		Command:         []string{path.Join(BinDir, "etcd")},
		Args: []string{
			"--name=member",
			"--data-dir=/var/lib/etcd",
			"--listen-client-urls=" + etcdClientURL,
			"--advertise-client-urls=" + etcdClientURL,
			"--listen-peer-urls=" + etcdPeerURL,
			"--initial-advertise-peer-urls=" + etcdPeerURL,
			"--initial-cluster=member=" + etcdPeerURL,
			"--initial-cluster-state=new",
			"--listen-metrics-urls=http://127.0.0.1:2381",
			"--cert-file=" + pki(incluster.KeyEtcdServerCert),
			"--key-file=" + pki(incluster.KeyEtcdServerKey),
			"--trusted-ca-file=" + pki(incluster.KeyEtcdCACert),
			"--client-cert-auth=true",
			"--log-level=warn",
			fmt.Sprintf("--quota-backend-bytes=%d", etcdQuota.Value()),
		},
		Resources:    incluster.Resources(res.Etcd, DefaultResources.Etcd),
		VolumeMounts: append([]corev1.VolumeMount{{Name: "etcd-data", MountPath: "/var/lib/etcd"}}, mounts...),
	}
	apiserver := corev1.Container{
		Name:            "kube-apiserver",
		Image:           img.APIServer,
		ImagePullPolicy: img.PullPolicy,
		Command:         []string{path.Join(BinDir, "kube-apiserver")},
		Args: append([]string{
			"--etcd-servers=" + etcdClientURL,
			"--etcd-cafile=" + pki(incluster.KeyEtcdCACert),
			"--etcd-certfile=" + pki(incluster.KeyEtcdClientCert),
			"--etcd-keyfile=" + pki(incluster.KeyEtcdClientKey),
			"--bind-address=0.0.0.0",
			fmt.Sprintf("--secure-port=%d", in.APIPort),
			"--advertise-address=" + in.ClusterIP,
			"--tls-cert-file=" + pki(incluster.KeyServingCert),
			"--tls-private-key-file=" + pki(incluster.KeyServingKey),
			"--client-ca-file=" + pki(incluster.KeyClientCACert),
			"--service-account-issuer=" + saIssuer,
			"--service-account-key-file=" + pki(incluster.KeySAPub),
			"--service-account-signing-key-file=" + pki(incluster.KeySAKey),
			// Node: kubelets reach only their own node's objects, and
			// NodeRestriction holds them to their own Node and pods.
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			// Pod Security's defaults: spec.cluster.podSecurity.
			"--admission-control-config-file=" + pki(admissionFile),
			"--kubelet-client-certificate=" + pki(incluster.KeyKubeletClientCert),
			"--kubelet-client-key=" + pki(incluster.KeyKubeletClientKey),
			// Node pods' names resolve nowhere; their InternalIP is their pod IP.
			"--kubelet-preferred-address-types=InternalIP",
			"--service-cluster-ip-range=" + incluster.MemberServiceCIDR,
			"--allow-privileged=true",
			"--profiling=false",
		}, versionFlags...),
		Ports:        []corev1.ContainerPort{{Name: "https", ContainerPort: in.APIPort, Protocol: corev1.ProtocolTCP}},
		Resources:    incluster.Resources(res.APIServer, DefaultResources.APIServer),
		VolumeMounts: append([]corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}, mounts...),
		// Readiness only: a liveness probe would restart an API server that
		// fails its checks and hide the failure from kobe's health checks,
		// which recycle the member instead.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz", Port: intstr.FromInt32(in.APIPort), Scheme: corev1.URISchemeHTTPS,
			}},
			PeriodSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 3,
		},
	}
	kcm := corev1.Container{
		Name:            "kube-controller-manager",
		Image:           img.ControllerManager,
		ImagePullPolicy: img.PullPolicy,
		Command:         []string{path.Join(BinDir, "kube-controller-manager")},
		Args: []string{
			"--kubeconfig=" + pki(incluster.KeyControllerManagerKubeconfig),
			"--service-account-private-key-file=" + pki(incluster.KeySAKey),
			"--root-ca-file=" + pki(incluster.KeyServerCACert),
			"--use-service-account-credentials=true",
			"--controllers=*",
			"--leader-elect=false",
			// A ServiceAccount and a token per controller at start: at
			// the default 20 requests a second, seconds of the member's
			// time to Ready (the local backend's measurement).
			"--kube-api-qps=200",
			"--kube-api-burst=400",
			"--secure-port=0",
			"--profiling=false",
		},
		Resources:    incluster.Resources(res.ControllerManager, DefaultResources.ControllerManager),
		VolumeMounts: append([]corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}, mounts...),
	}
	if nodeCount(in.Member) > 0 {
		apiserver.Args = append(apiserver.Args, egressFlags(in.PKIDir)...)
	}
	pod := corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{etcd, apiserver, kcm},
		Volumes: []corev1.Volume{
			emptyDir("etcd-data", etcdDataSize),
			emptyDir("tmp", tmpSize),
		},
	}}
	if nodeCount(in.Member) > 0 {
		// Pods of a member with nodes need a scheduler.
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name:            "kube-scheduler",
			Image:           img.Scheduler,
			ImagePullPolicy: img.PullPolicy,
			Command:         []string{path.Join(BinDir, "kube-scheduler")},
			Args: []string{
				"--kubeconfig=" + pki(incluster.KeySchedulerKubeconfig),
				"--leader-elect=false",
				"--secure-port=0",
				"--profiling=false",
			},
			Resources:    incluster.Resources(nil, DefaultResources.Scheduler),
			VolumeMounts: append([]corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}, mounts...),
		})
	}
	pod.Name = in.PodName(0)
	nodes, err := t.nodePods(in, img)
	if err != nil {
		return nil, err
	}
	return append([]corev1.Pod{pod}, nodes...), nil
}

// New wires the kubernetes backend: the in-cluster machinery with this
// template, for kobev1.BackendKubernetes.
func New(o Options) (*incluster.Backend, error) {
	var exec incluster.PodExec
	if o.Config != nil {
		e, err := newPodExec(o.Config)
		if err != nil {
			return nil, err
		}
		exec = e
	}
	return incluster.New(incluster.Options{
		Type:     kobev1.BackendKubernetes,
		Template: Template{NodeImage: o.NodeImage, NodePreload: o.NodePreload},
		// Any x.y.z whose images exist; one server per member.
		Capabilities:         backend.Capabilities{MaxServers: 1},
		Client:               o.Client,
		Namespace:            o.Namespace,
		OperatorSelector:     o.OperatorSelector,
		UnschedulableTimeout: o.UnschedulableTimeout,
		Log:                  o.Log,
		DefaultNodes:         func(spec *kobev1.ClusterPoolSpec) (int32, string) { return defaultNodes(o.DefaultNodes, spec) },
		HostRanges:           o.HostRanges,
		EnforcesLimits:       true, // limits.go
		Exec:                 exec,
		NodeImport:           node.ImportCommand(nodeBinDir+"/ctr", node.ContainerdSocket, "-"),
	})
}
