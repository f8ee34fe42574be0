package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackendType names the provisioner that builds a pool's members.
// +kubebuilder:validation:Enum=local;kubernetes;k3s;k0s;vcluster;capi;sim
type BackendType string

const (
	// BackendLocal runs each member's control plane as processes on the operator's host.
	BackendLocal BackendType = "local"
	// BackendKubernetes runs each member's control plane (etcd,
	// kube-apiserver, kube-controller-manager) as pods of the host cluster.
	// It is the default: a pool that names no backend works on a fresh
	// install of the chart.
	BackendKubernetes BackendType = "kubernetes"
	// BackendK3s runs each member as a k3s server in the host cluster.
	BackendK3s BackendType = "k3s"
	// BackendK0s runs each member as a k0s controller in the host cluster.
	BackendK0s BackendType = "k0s"
	// BackendVCluster runs each member as a vcluster.
	BackendVCluster BackendType = "vcluster"
	// BackendCAPI provisions each member through Cluster API.
	BackendCAPI BackendType = "capi"
	// BackendSim simulates members: no processes, no cluster behind the
	// endpoint. For benchmarks, scale tests and demos of pool behaviour
	// only; the operator refuses it unless started with --enable-sim-backend.
	BackendSim BackendType = "sim"
)

// ClusterPoolSpec is the pool the operator keeps converging on.
// +kubebuilder:validation:XValidation:rule="!has(self.idleTimeout) || ((has(self.access) && has(self.access.mode)) ? self.access.mode == 'Proxy' : !(has(self.backend.type) && (self.backend.type == 'local' || self.backend.type == 'sim')))",message="idleTimeout needs access mode Proxy (kobe sees a member's traffic only through its connect proxy): set access.mode: Proxy, or remove idleTimeout"
// +kubebuilder:validation:XValidation:rule="!has(self.scaling) || !has(self.scaling.minReady) || !has(self.scaling.maxClusters) || self.scaling.maxClusters >= self.scaling.minReady",message="scaling.maxClusters must be greater than or equal to scaling.minReady"
type ClusterPoolSpec struct {
	// size is the number of warm (Ready) members to keep. Ignored when scaling is set.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=500
	Size *int32 `json:"size,omitempty"`

	// ttl is the lease duration used when a lease request names none.
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="ttl must be greater than zero"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// heartbeatTimeout is the heartbeat timeout of a lease that names none:
	// such a lease ends (HeartbeatMissed) once its holder has sent no
	// heartbeat for that long. Unset: leases that name none take no
	// heartbeats and last their ttl. 10s to 24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="heartbeatTimeout must be between 10s and 24h"
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`

	// idleTimeout ends a lease (reason Idle) once nothing went through the
	// connect proxy to its member for that long, whatever its ttl. Only
	// for pools whose members are reached through the proxy (access mode
	// Proxy): with Direct access kobe does not see the traffic. 10s to 24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="idleTimeout must be between 10s and 24h"
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// backend selects the provisioner and holds its settings.
	// +optional
	// +kubebuilder:default={type: kubernetes}
	Backend BackendSpec `json:"backend,omitempty"`

	// access says how lease holders reach members: Direct (the kubeconfig
	// points at the member's API server) or Proxy (it points at kobe's
	// connect proxy). Unset, it is Proxy for backends whose members live in
	// the host cluster and Direct for local and sim.
	// +optional
	Access *AccessSpec `json:"access,omitempty"`

	// cluster describes each member cluster.
	// +optional
	Cluster ClusterTemplate `json:"cluster,omitempty"`

	// scaling makes the pool track demand between minReady and maxClusters.
	// When set, size is ignored.
	// +optional
	Scaling *ScalingSpec `json:"scaling,omitempty"`

	// healthCheck probes Ready members; a member failing failureThreshold
	// consecutive probes is recycled without ever being offered.
	// +optional
	HealthCheck *HealthCheckSpec `json:"healthCheck,omitempty"`

	// readinessGates must all pass before a member becomes Ready. A gate is
	// known by its name (its type when it has none), which must be unique:
	// several gates of one type need names.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(g, self.filter(h, (has(h.name) ? h.name : h.type) == (has(g.name) ? g.name : g.type)).size() == 1)",message="readinessGates must have unique names (a gate without a name is known by its type): give gates of one type different names"
	ReadinessGates []ReadinessGate `json:"readinessGates,omitempty"`

	// bootstraps are BootstrapConfigs applied to each member before it is
	// Ready, each with the values of its parameters.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Bootstraps []BootstrapRef `json:"bootstraps,omitempty"`

	// snapshot restores new members from a backup of a golden cluster.
	// +optional
	Snapshot *SnapshotSpec `json:"snapshot,omitempty"`

	// creatingTimeout is how long a member may stay Creating before it is
	// destroyed and replaced.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="creatingTimeout must be greater than zero"
	CreatingTimeout *metav1.Duration `json:"creatingTimeout,omitempty"`

	// rollout says how Ready members built from an older template (or
	// Ready for longer than maxIdle) are replaced: surge-style, new members
	// first.
	// +optional
	Rollout *RolloutSpec `json:"rollout,omitempty"`

	// maxIdle bounds how long a member may sit Ready, unleased, before it
	// is rebuilt (replaced surge-style, as in a template rollout). Unset,
	// a member waits as long as it stays healthy.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) >= duration('1s')",message="maxIdle must be at least 1s"
	MaxIdle *metav1.Duration `json:"maxIdle,omitempty"`

	// warm says how the pool's warm (Ready, unleased) members wait.
	// +optional
	Warm *WarmSpec `json:"warm,omitempty"`
}

// WarmSpec says how warm members wait for a lease.
type WarmSpec struct {
	// running is how many warm members keep running; the others are
	// frozen (the cgroup freezer: no CPU while they wait, memory kept) and
	// thawed, then health-checked, ahead of the leases that wait for them.
	// Only the local backend with an operator running as root on cgroup v2
	// freezes; elsewhere every member runs. Set it to the pool's size (or
	// more) to keep every member running. Unset: 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=500
	Running *int32 `json:"running,omitempty"`
}

// TemplateChangePolicy says what happens to Ready members when what members
// are built from changes.
// +kubebuilder:validation:Enum=Recreate;Ignore
type TemplateChangePolicy string

const (
	// TemplateChangeRecreate replaces Ready members built from an older
	// template, surge-style (the default).
	TemplateChangeRecreate TemplateChangePolicy = "Recreate"
	// TemplateChangeIgnore keeps them until they are leased or scaled down;
	// only new members use the new template.
	TemplateChangeIgnore TemplateChangePolicy = "Ignore"
)

// RolloutSpec says how outdated members are replaced.
type RolloutSpec struct {
	// maxSurge is how many members the pool builds at a time beyond its
	// warm target while it replaces outdated ones (1 when unset). A host
	// protection knob: each extra member costs a full member's CPU and
	// memory while it builds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxSurge *int32 `json:"maxSurge,omitempty"`

	// onTemplateChange is Recreate (the default: Ready members built from
	// an older template are replaced) or Ignore (they stay until leased or
	// scaled down).
	// +optional
	OnTemplateChange TemplateChangePolicy `json:"onTemplateChange,omitempty"`
}

// BackendSpec selects the backend and carries its specific settings.
// +kubebuilder:validation:XValidation:rule="!has(self.local) || self.type == 'local'",message="backend.local may only be set when backend.type is local"
// +kubebuilder:validation:XValidation:rule="!has(self.kubernetes) || self.type == 'kubernetes'",message="backend.kubernetes may only be set when backend.type is kubernetes"
// +kubebuilder:validation:XValidation:rule="!has(self.k3s) || self.type == 'k3s'",message="backend.k3s may only be set when backend.type is k3s"
// +kubebuilder:validation:XValidation:rule="!has(self.k0s) || self.type == 'k0s'",message="backend.k0s may only be set when backend.type is k0s"
// +kubebuilder:validation:XValidation:rule="!has(self.vcluster) || self.type == 'vcluster'",message="backend.vcluster may only be set when backend.type is vcluster"
// +kubebuilder:validation:XValidation:rule="!has(self.capi) || self.type == 'capi'",message="backend.capi may only be set when backend.type is capi"
// +kubebuilder:validation:XValidation:rule="!has(self.sim) || self.type == 'sim'",message="backend.sim may only be set when backend.type is sim"
type BackendSpec struct {
	// type is the provisioner: kubernetes, local, k3s, k0s, vcluster or capi.
	// +optional
	// +kubebuilder:default=kubernetes
	Type BackendType `json:"type,omitempty"`

	// local configures the local backend.
	// +optional
	Local *LocalBackendSpec `json:"local,omitempty"`

	// kubernetes configures the kubernetes backend.
	// +optional
	Kubernetes *KubernetesBackendSpec `json:"kubernetes,omitempty"`

	// k3s configures the k3s backend.
	// +optional
	K3s *K3sBackendSpec `json:"k3s,omitempty"`

	// k0s configures the k0s backend.
	// +optional
	K0s *K0sBackendSpec `json:"k0s,omitempty"`

	// vcluster configures the vcluster backend.
	// +optional
	VCluster *VClusterBackendSpec `json:"vcluster,omitempty"`

	// capi configures the Cluster API backend.
	// +optional
	CAPI *CAPIBackendSpec `json:"capi,omitempty"`

	// sim configures the simulated backend (benchmarks and demos only).
	// +optional
	Sim *SimBackendSpec `json:"sim,omitempty"`
}

// SimBackendSpec configures simulated members: they hold no processes and
// their endpoint answers nothing, but each gets real access material so that
// a lease's kubeconfig is minted exactly as for a real member.
type SimBackendSpec struct {
	// readyAfter is how long a simulated member takes to become Ready.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=64
	ReadyAfter *metav1.Duration `json:"readyAfter,omitempty"`

	// failurePercent is the share of simulated members, in percent, that
	// fail while provisioning instead of becoming Ready.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailurePercent int32 `json:"failurePercent,omitempty"`
}

// LocalBackendSpec configures members run as processes on the operator's host.
// +kubebuilder:validation:XValidation:rule="!(has(self.scheduling) && self.scheduling && has(self.nodes) && self.nodes > 0)",message="backend.local.scheduling (a simulated kwok node) and backend.local.nodes (real nodes) exclude each other: set one"
// +kubebuilder:validation:XValidation:rule="!has(self.preloadImages) || size(self.preloadImages) == 0 || (has(self.nodes) ? self.nodes > 0 : !(has(self.scheduling) && self.scheduling))",message="backend.local.preloadImages needs real nodes: only they run images (backend.local.nodes is 0, or unset with scheduling)"
type LocalBackendSpec struct {
	// scheduling adds kube-scheduler and a simulated node (kwok) to each
	// member, so that pods are scheduled and reach Running.
	// +optional
	Scheduling bool `json:"scheduling,omitempty"`

	// nodes is the number of real nodes of each member: a kubelet with its
	// own containerd and kube-proxy in its own network and mount namespaces
	// on the operator's host, plus kube-scheduler. Unset: 1 where the
	// operator can run nodes (root and the node binaries, docs/backends.md),
	// else 0, and the pool's Nodes condition says why; with scheduling, 0.
	// 0 asks for API-only members (cheaper; pods are never run).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4
	Nodes *int32 `json:"nodes,omitempty"`

	// preloadImages are image archives (docker-archive or OCI tar files)
	// in the operator's --local-image-dir, imported into every node's
	// containerd when the member is created, so that pods can use them
	// with imagePullPolicy Never or IfNotPresent and no registry.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*\.tar$`
	PreloadImages []string `json:"preloadImages,omitempty"`
}

// AccessMode is how lease holders reach a member.
// +kubebuilder:validation:Enum=Direct;Proxy
type AccessMode string

const (
	// AccessDirect: the lease's kubeconfig points at the member's own API
	// server, for callers inside the network that reaches it.
	AccessDirect AccessMode = "Direct"
	// AccessProxy: the lease's kubeconfig points at kobe's connect proxy,
	// which checks the lease on every request and forwards it to the member
	// with credentials the caller never sees.
	AccessProxy AccessMode = "Proxy"
)

// AccessSpec says how lease holders reach members.
type AccessSpec struct {
	// mode is Direct or Proxy.
	// +optional
	Mode AccessMode `json:"mode,omitempty"`
}

// KubernetesBackendSpec configures members whose control plane runs as pods
// of the host cluster: etcd, kube-apiserver and kube-controller-manager.
type KubernetesBackendSpec struct {
	// images overrides the component images. Each defaults to the upstream
	// image of the member's cluster.version (registry.k8s.io).
	// +optional
	Images *KubernetesImages `json:"images,omitempty"`

	// resources of each component container. Unset components get kobe's
	// defaults (see the backend's documentation).
	// +optional
	Resources *KubernetesResources `json:"resources,omitempty"`

	// placement of the member's pods on the host cluster's nodes.
	// +optional
	Placement *Placement `json:"placement,omitempty"`

	// nodes is the number of node pods of each member: a privileged pod
	// running containerd and kubelet, registered to the member, in which
	// the member's pods run as nested containers. Unset: the operator's
	// default (1, unless its --kubernetes-default-nodes says otherwise or
	// the member's version needs a node image the pool does not name; the
	// pool's Nodes condition says which). 0 asks for API-only members.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4
	Nodes *int32 `json:"nodes,omitempty"`
}

// KubernetesImages names the images of a member's control-plane components.
type KubernetesImages struct {
	// etcd image; its binary must be /usr/local/bin/etcd.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Etcd string `json:"etcd,omitempty"`

	// apiServer image; its binary must be /usr/local/bin/kube-apiserver.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	APIServer string `json:"apiServer,omitempty"`

	// controllerManager image; its binary must be
	// /usr/local/bin/kube-controller-manager.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ControllerManager string `json:"controllerManager,omitempty"`

	// node image of node pods: containerd, runc, kubelet, the CNI
	// plugins and the pause image (make image-node builds it).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Node string `json:"node,omitempty"`

	// pullPolicy of every component image.
	// +optional
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	PullPolicy corev1.PullPolicy `json:"pullPolicy,omitempty"`
}

// KubernetesResources are the requests and limits of each component.
type KubernetesResources struct {
	// etcd container resources.
	// +optional
	Etcd *corev1.ResourceRequirements `json:"etcd,omitempty"`

	// apiServer container resources.
	// +optional
	APIServer *corev1.ResourceRequirements `json:"apiServer,omitempty"`

	// controllerManager container resources.
	// +optional
	ControllerManager *corev1.ResourceRequirements `json:"controllerManager,omitempty"`

	// node pod resources (kubelet, containerd and every pod of the
	// member's workload on that node).
	// +optional
	Node *corev1.ResourceRequirements `json:"node,omitempty"`
}

// Placement puts a member's pods on host-cluster nodes.
type Placement struct {
	// nodeSelector the member's pods must match.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations of the member's pods.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// spreadAcrossNodes spreads the pool's members over nodes (a topology
	// spread constraint on kubernetes.io/hostname, ScheduleAnyway).
	// +optional
	// +kubebuilder:default=true
	SpreadAcrossNodes *bool `json:"spreadAcrossNodes,omitempty"`

	// priorityClassName of the member's pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// K3sBackendSpec configures k3s members.
type K3sBackendSpec struct {
	// image overrides the k3s server image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// datastore is where the k3s server keeps its state.
	// +optional
	// +kubebuilder:validation:Enum=sqlite;postgres
	Datastore string `json:"datastore,omitempty"`
}

// K0sBackendSpec configures k0s members.
type K0sBackendSpec struct {
	// image overrides the k0s controller image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
}

// VClusterBackendSpec configures vcluster members.
type VClusterBackendSpec struct {
	// chartVersion is the vcluster Helm chart version.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ChartVersion string `json:"chartVersion,omitempty"`
}

// CAPIBackendSpec configures Cluster API members.
type CAPIBackendSpec struct {
	// clusterClass is the ClusterClass members are created from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClusterClass string `json:"clusterClass,omitempty"`
}

// ClusterTemplate describes each member cluster.
type ClusterTemplate struct {
	// version is the Kubernetes version of each member, in the backend's notation.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`

	// servers is the number of control-plane servers of each member.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	Servers *int32 `json:"servers,omitempty"`

	// podSecurity is the Pod Security Standard level the member's API
	// server enforces in every namespace (baseline when unset). A pod that
	// is privileged or mounts a host path is root on the member's node:
	// privileged trusts the lease holder with the node and what it can see.
	// +optional
	PodSecurity PodSecurityLevel `json:"podSecurity,omitempty"`

	// egress is where the member's pods may connect beyond their own
	// member. Unset: nowhere (the default). Enforced by the local
	// backend's host firewall for members with nodes.
	// +optional
	Egress *EgressSpec `json:"egress,omitempty"`

	// registryMirrors are where the members' nodes pull images from
	// instead of (before) the registries the images name: a pull-through
	// cache or a registry inside the network. The mirror's address must be
	// reachable under egress (allowCIDRs for a private one).
	// +optional
	// +listType=map
	// +listMapKey=registry
	// +kubebuilder:validation:MaxItems=16
	RegistryMirrors []RegistryMirror `json:"registryMirrors,omitempty"`

	// limits bound what each member may take of the host it runs on, so
	// that a holder at a limit fails inside the member and never takes a
	// neighbour or the operator with it. Unset fields get the operator's
	// defaults, and every field is capped at the operator's ceiling
	// (status.memberLimits says what members get; docs/security.md).
	// +optional
	Limits *MemberLimits `json:"limits,omitempty"`

	// networkVolumes says whether the member's pods may use volumes that
	// the node's kernel mounts from the network (nfs, iscsi, cephfs, rbd,
	// glusterfs, fc, and PersistentVolumes of those kinds): Refused (the
	// default) or Allowed. The host kernel mounts whatever the holder
	// serves, and a hung hard mount leaves processes nothing can kill;
	// Allowed is for pools whose pods need them, and egress then applies
	// to the mounts.
	// +optional
	NetworkVolumes NetworkVolumePolicy `json:"networkVolumes,omitempty"`
}

// NetworkVolumePolicy says whether a member's pods may mount network volumes.
// +kubebuilder:validation:Enum=Refused;Allowed
type NetworkVolumePolicy string

const (
	// NetworkVolumesRefused: the member's API server refuses pods and
	// PersistentVolumes with a kernel-mounted network volume.
	NetworkVolumesRefused NetworkVolumePolicy = "Refused"
	// NetworkVolumesAllowed: they are admitted.
	NetworkVolumesAllowed NetworkVolumePolicy = "Allowed"
)

// MemberLimits bound one member as a whole: its control plane and its
// nodes with every pod on them.
type MemberLimits struct {
	// memory is the memory the member may use in all, enforced by the
	// kernel: past it the kernel's OOM killer picks a process of this
	// member only.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('256Mi')) >= 0",message="limits.memory must be at least 256Mi: a member's control plane alone needs about that"
	Memory *resource.Quantity `json:"memory,omitempty"`

	// processes is how many processes and threads the member may run at
	// once, in all (the kernel's pids.max): past it a fork fails inside the
	// member only.
	// +optional
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=4194304
	Processes *int64 `json:"processes,omitempty"`

	// podProcesses is how many processes and threads one pod of the member
	// may run at once (the member kubelets' podPidsLimit).
	// +optional
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=4194304
	PodProcesses *int64 `json:"podProcesses,omitempty"`

	// disk is the space the member's data may take on the host (etcd,
	// logs, images, containers' layers, emptyDirs, hostPath volumes):
	// a write past it fails with ENOSPC inside the member.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('1Gi')) >= 0",message="limits.disk must be at least 1Gi: etcd and the logs of a member need about that"
	Disk *resource.Quantity `json:"disk,omitempty"`
}

// RegistryMirror sends the pulls of images of one registry to mirrors.
type RegistryMirror struct {
	// registry is the registry host (and port) images name, as in
	// docker.io/library/nginx or ghcr.io/org/app; "*" for every registry.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]{1,5})?)$`
	Registry string `json:"registry"`

	// endpoints are the mirrors' URLs (http or https, host and optional
	// port and path), tried in order; the registry itself is tried last.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=512
	// +kubebuilder:validation:items:Pattern=`^https?://[A-Za-z0-9][-A-Za-z0-9.]*(:[0-9]{1,5})?(/[-A-Za-z0-9._~/%]*)?$`
	Endpoints []string `json:"endpoints"`
}

// EgressMode says how far a member's pods reach.
// +kubebuilder:validation:Enum=None;Public
type EgressMode string

const (
	// EgressNone keeps a member's pods to their own member.
	EgressNone EgressMode = "None"
	// EgressPublic lets a member's pods also reach public unicast IPv4
	// addresses (a registry, for image pulls).
	EgressPublic EgressMode = "Public"
)

// EgressSpec opens a member's pods to the world beyond their member. The
// private, shared and reserved ranges stay out of reach unless allowCIDRs
// lists them. Loopback, link-local addresses (cloud metadata) and
// multicast never are, whatever allowCIDRs lists; nor, for the kubernetes
// backend, the host cluster's pod and Service ranges and its nodes'
// addresses (the operator's --kubernetes-host-cidrs; docs/backends.md).
type EgressSpec struct {
	// mode is None (the default) or Public.
	// +optional
	Mode EgressMode `json:"mode,omitempty"`

	// allowCIDRs are IPv4 ranges the member's pods may reach in addition
	// to what mode gives: a registry mirror on a private address, say.
	// Never loopback (127.0.0.0/8) or link-local
	// (169.254.0.0/16), nor a range that holds them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && cidr(c).ip().family() == 4)",message="egress.allowCIDRs holds IPv4 CIDRs only, such as 10.20.0.0/16"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !isCIDR(c) || !(cidr(c).containsCIDR('127.0.0.0/8') || cidr('127.0.0.0/8').containsCIDR(c) || cidr(c).containsCIDR('169.254.0.0/16') || cidr('169.254.0.0/16').containsCIDR(c) || cidr(c).containsCIDR('0.0.0.0/8') || cidr('0.0.0.0/8').containsCIDR(c)))",message="egress.allowCIDRs may not reach loopback (127.0.0.0/8), link-local and cloud metadata (169.254.0.0/16) or 0.0.0.0/8"
	AllowCIDRs []string `json:"allowCIDRs,omitempty"`
}

// MirrorsByRegistry maps each mirrored registry to its endpoints, the form
// the nodes' container runtime takes; nil when there is none.
func (c ClusterTemplate) MirrorsByRegistry() map[string][]string {
	if len(c.RegistryMirrors) == 0 {
		return nil
	}
	out := make(map[string][]string, len(c.RegistryMirrors))
	for _, m := range c.RegistryMirrors {
		out[m.Registry] = append([]string(nil), m.Endpoints...)
	}
	return out
}

// EffectiveEgress is the member's egress: None when unset.
func (c ClusterTemplate) EffectiveEgress() EgressSpec {
	if c.Egress == nil {
		return EgressSpec{Mode: EgressNone}
	}
	e := *c.Egress
	if e.Mode == "" {
		e.Mode = EgressNone
	}
	return e
}

// PodSecurityLevel is a Pod Security Standard level.
// +kubebuilder:validation:Enum=privileged;baseline;restricted
type PodSecurityLevel string

const (
	PodSecurityPrivileged PodSecurityLevel = "privileged"
	PodSecurityBaseline   PodSecurityLevel = "baseline"
	PodSecurityRestricted PodSecurityLevel = "restricted"
)

// EffectivePodSecurity is the level a member enforces: baseline when unset.
func (c ClusterTemplate) EffectivePodSecurity() PodSecurityLevel {
	if c.PodSecurity == "" {
		return PodSecurityBaseline
	}
	return c.PodSecurity
}

// ScalingMode says how a scaling pool picks its warm target.
// +kubebuilder:validation:Enum=Fixed;Reactive;Predictive
type ScalingMode string

const (
	// ScalingFixed keeps minReady members warm, whatever the demand;
	// leases that find none queue (at most maxClusters members).
	ScalingFixed ScalingMode = "Fixed"
	// ScalingReactive (the default) keeps minReady warm, grows toward
	// maxClusters while leases queue or Ready drops to scaleUpThreshold,
	// and shrinks back scaleDownAfter after the last such pressure.
	ScalingReactive ScalingMode = "Reactive"
	// ScalingPredictive is Reactive aiming for the warm target the
	// measured demand asks for (status.demand.warmTarget) instead of
	// minReady, bounded by minReady and maxClusters.
	ScalingPredictive ScalingMode = "Predictive"
)

// ScalingSpec makes a pool follow demand instead of holding a fixed size.
// +kubebuilder:validation:XValidation:rule="!has(self.scaleUpThreshold) || !has(self.minReady) || self.minReady == 0 || self.scaleUpThreshold < self.minReady",message="scaling.scaleUpThreshold must be less than scaling.minReady: Ready drops to the threshold only from above"
type ScalingSpec struct {
	// mode is Fixed, Reactive (the default) or Predictive.
	// +optional
	Mode ScalingMode `json:"mode,omitempty"`

	// minReady is the number of Ready members kept at rest.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=500
	MinReady *int32 `json:"minReady,omitempty"`

	// maxClusters caps the members of any phase.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxClusters *int32 `json:"maxClusters,omitempty"`

	// scaleUpThreshold: start creating more when the Ready count drops to
	// this while members are leased: the pool then builds as many members
	// again as leases took from the warm target, on top of refilling it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=500
	ScaleUpThreshold *int32 `json:"scaleUpThreshold,omitempty"`

	// scaleDownAfter is how long the pool must see no pressure (no queued
	// lease, Ready above scaleUpThreshold) before it removes idle Ready
	// members beyond its warm target (5m when unset; 0s: at once).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	ScaleDownAfter *metav1.Duration `json:"scaleDownAfter,omitempty"`

	// predictiveWindow is how far back lease arrivals are measured for
	// status.demand (1h when unset): the peak rate over it, in twelve
	// buckets, sizes the warm target.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1m') && duration(self) <= duration('168h'))",message="predictiveWindow must be between 1m and 168h"
	PredictiveWindow *metav1.Duration `json:"predictiveWindow,omitempty"`

	// queueTimeout ends a lease that waited this long for a member.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) > duration('0s')",message="queueTimeout must be greater than zero"
	QueueTimeout *metav1.Duration `json:"queueTimeout,omitempty"`
}

// HealthCheckSpec configures periodic probes of Ready members.
type HealthCheckSpec struct {
	// intervalSeconds between probes of a Ready member.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	IntervalSeconds int32 `json:"intervalSeconds,omitempty"`

	// failureThreshold is the number of consecutive failed probes that recycles a member.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// ReadinessGate names a signal a member must show before it is Ready.
// Built-in gates are evaluated by the operator: APIServerReachable,
// InClusterToken, DefaultServiceAccount, NodesReady (with real nodes, every
// node Ready and a probe pod run on each), DNSHealthy (with real nodes: the
// cluster DNS answers a pod), CRDExists (crd), DeploymentReady
// (deployment), URLHealthy (url) and BootstrapsComplete (alias AddonsReady:
// the pool's bootstraps are applied). Any other type is a condition that
// something else must set to True on the ClusterInstance. The gate's result
// is the ClusterInstance condition named after the gate.
// +kubebuilder:validation:XValidation:rule="self.type == 'CRDExists' ? has(self.crd) : !has(self.crd)",message="crd is required for a gate of type CRDExists, and only for it"
// +kubebuilder:validation:XValidation:rule="self.type == 'DeploymentReady' ? has(self.deployment) : !has(self.deployment)",message="deployment is required for a gate of type DeploymentReady, and only for it"
// +kubebuilder:validation:XValidation:rule="self.type == 'URLHealthy' ? has(self.url) : !has(self.url)",message="url is required for a gate of type URLHealthy, and only for it"
// +kubebuilder:validation:XValidation:rule="!has(self.name) || self.name == self.type || !(self.name in ['APIServerReachable', 'InClusterToken', 'DefaultServiceAccount', 'NodesReady', 'DNSHealthy', 'CRDExists', 'DeploymentReady', 'URLHealthy', 'BootstrapsComplete', 'AddonsReady', 'Ready', 'Provisioned', 'Healthy'])",message="name must not be a built-in gate type or a ClusterInstance condition kobe sets (Ready, Provisioned, Healthy)"
type ReadinessGate struct {
	// type of the gate, or the ClusterInstance condition type it waits for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9]*$`
	Type string `json:"type"`

	// name of the gate among the pool's gates, and the type of the
	// ClusterInstance condition that reports it; the type when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9]*$`
	Name string `json:"name,omitempty"`

	// crd of a CRDExists gate: the CustomResourceDefinition that must exist
	// in the member and be Established.
	// +optional
	CRD *CRDGate `json:"crd,omitempty"`

	// deployment of a DeploymentReady gate: the Deployment in the member
	// that must have rolled out (every replica updated and available).
	// +optional
	Deployment *DeploymentGate `json:"deployment,omitempty"`

	// url of a URLHealthy gate: an http or https URL that must answer GET
	// with a 2xx status. The operator sends the request from its own network,
	// which for the local backend is the member's host.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="url must be an absolute http or https URL"
	URL string `json:"url,omitempty"`
}

// Key is the gate's name, or its type when it has none: the ClusterInstance
// condition that reports it.
func (g ReadinessGate) Key() string {
	if g.Name != "" {
		return g.Name
	}
	return g.Type
}

// CRDGate names a CustomResourceDefinition.
type CRDGate struct {
	// name of the CustomResourceDefinition (<plural>.<group>).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// DeploymentGate names a Deployment.
type DeploymentGate struct {
	// namespace of the Deployment.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// name of the Deployment.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// SnapshotSpec restores members from a Velero backup of a golden cluster.
type SnapshotSpec struct {
	// velero names the backup to restore from.
	// +required
	Velero VeleroSnapshot `json:"velero"`
}

// VeleroSnapshot names a Velero backup.
type VeleroSnapshot struct {
	// backupName of the golden cluster's backup.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupName string `json:"backupName"`

	// namespace where Velero runs.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// PoolPhase summarises a pool at a glance.
// +kubebuilder:validation:Enum=Filling;Healthy;Degraded;Quarantined;Terminating
type PoolPhase string

const (
	// PoolFilling: fewer Ready members than wanted, and members are coming up.
	PoolFilling PoolPhase = "Filling"
	// PoolHealthy: the warm target is met.
	PoolHealthy PoolPhase = "Healthy"
	// PoolDegraded: the pool cannot reach its target (backend failing, gate never met).
	PoolDegraded PoolPhase = "Degraded"
	// PoolQuarantined: at least one member's cleanup could not be proven.
	PoolQuarantined PoolPhase = "Quarantined"
	// PoolTerminating: the pool is being deleted.
	PoolTerminating PoolPhase = "Terminating"
)

// ClusterPoolStatus is what the pool looks like now.
type ClusterPoolStatus struct {
	// observedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase summarises the pool.
	// +optional
	Phase PoolPhase `json:"phase,omitempty"`

	// ready counts members in the Ready phase.
	// +optional
	// +kubebuilder:default=0
	Ready int32 `json:"ready"`
	// leased counts members in the Leased phase.
	// +optional
	// +kubebuilder:default=0
	Leased int32 `json:"leased"`
	// creating counts members in the Creating phase.
	// +optional
	// +kubebuilder:default=0
	Creating int32 `json:"creating"`
	// recycling counts members being torn down.
	// +optional
	// +kubebuilder:default=0
	Recycling int32 `json:"recycling"`
	// unhealthy counts Ready members failing health checks.
	// +optional
	// +kubebuilder:default=0
	Unhealthy int32 `json:"unhealthy"`
	// quarantined counts members whose cleanup could not be proven.
	// +optional
	// +kubebuilder:default=0
	Quarantined int32 `json:"quarantined"`
	// queueDepth counts leases waiting for a member.
	// +optional
	// +kubebuilder:default=0
	QueueDepth int32 `json:"queueDepth"`

	// failures counts consecutive members that failed to become Ready; it
	// goes back to 0 when a member becomes Ready (the total is the
	// kobe_pool_member_failures_total metric). New members are created with
	// an exponential backoff while it is above 0.
	// +optional
	// +kubebuilder:default=0
	Failures int32 `json:"failures"`

	// creatingTimeouts counts, of those consecutive failures, the members
	// reaped by creatingTimeout: two or more are reported as churn.
	// +optional
	CreatingTimeouts int32 `json:"creatingTimeouts,omitempty"`

	// lastFailure is the latest member that failed to become Ready.
	// +optional
	LastFailure *MemberFailure `json:"lastFailure,omitempty"`

	// countedFailures names the failed members, not yet gone, that failures
	// already counts: the pool controller counts a failed member once and
	// names it here; the member is deleted only once it is named, and its
	// name leaves when the member is gone.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	CountedFailures []string `json:"countedFailures,omitempty"`

	// outdated counts unbound Ready or Creating members that the pool
	// replaces: built from an older template (rollout.onTemplateChange
	// Recreate) or Ready for longer than maxIdle.
	// +optional
	// +kubebuilder:default=0
	Outdated int32 `json:"outdated"`

	// templateRevision goes up by one each time templateHash changes: the
	// revision of the template new members are built from.
	// +optional
	TemplateRevision int64 `json:"templateRevision,omitempty"`

	// lastPressure is the last time the pool saw demand pressure (a queued
	// lease, or Ready down to scaleUpThreshold); it shrinks only
	// scaleDownAfter after it.
	// +optional
	LastPressure *metav1.Time `json:"lastPressure,omitempty"`

	// demand is the measured lease arrival rate and member provisioning
	// time, and the warm target that covers them (scaling pools only).
	// +optional
	Demand *DemandStatus `json:"demand,omitempty"`

	// nextOrdinal ends the block of ordinals reserved for member names: the
	// operator names members from the block without a write each, and
	// reserves the next block past it. Ordinals are never reused; an
	// operator restart skips the rest of a block.
	// +optional
	NextOrdinal int32 `json:"nextOrdinal,omitempty"`

	// memberLimits are the limits new members get: the pool's
	// cluster.limits with the operator's defaults and ceilings applied.
	// +optional
	MemberLimits *MemberLimits `json:"memberLimits,omitempty"`

	// templateHash identifies the member template the pool builds now.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TemplateHash string `json:"templateHash,omitempty"`

	// conditions: Warm, Capacity, Provisioning, DemandCovered (with
	// scaling), NetworkPolicyEnforced (kubernetes backend), Nodes (local
	// and kubernetes backends: whether members have real nodes, and why
	// not), FieldNotImplemented and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MemberFailure is a member that failed to become Ready.
type MemberFailure struct {
	// member is the ClusterInstance's name.
	Member string `json:"member"`
	// reason is why it failed (ProvisionFailed, CreatingTimeout, ...).
	Reason string `json:"reason"`
	// message says what the backend or the timeout reported.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// time the failure was recorded.
	Time metav1.Time `json:"time"`
	// templateHash of the member: create backoff applies only while the
	// pool's template is still the one that failed.
	// +optional
	TemplateHash string `json:"templateHash,omitempty"`
}

// DemandStatus is the pool's measured demand and the warm count that covers
// it: peak arrivals per minute x minutes to provision one member.
type DemandStatus struct {
	// window is how far back arrivals are kept.
	Window metav1.Duration `json:"window"`
	// bucketSeconds is the width of each arrivals bucket (window / 12).
	BucketSeconds int32 `json:"bucketSeconds"`
	// arrivals are the non-empty buckets of lease arrivals within the
	// window, oldest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Arrivals []ArrivalBucket `json:"arrivals,omitempty"`
	// countedThrough: every lease of the pool created at or before this
	// instant is counted in arrivals.
	// +optional
	CountedThrough *metav1.Time `json:"countedThrough,omitempty"`
	// peakArrivalsPerMinute is the highest bucket's rate, in leases per
	// minute (a decimal, for humans).
	// +optional
	PeakArrivalsPerMinute string `json:"peakArrivalsPerMinute,omitempty"`
	// provisionSeconds is the median time of recent members from creation
	// to Ready.
	// +optional
	ProvisionSeconds int32 `json:"provisionSeconds,omitempty"`
	// warmTarget is the warm count that covers the peak for one
	// provisioning time: ceil(peak arrivals per minute x provisioning
	// minutes). scaling.mode Predictive aims for it.
	// +optional
	WarmTarget int32 `json:"warmTarget"`
}

// ArrivalBucket counts the leases that arrived in one bucket.
type ArrivalBucket struct {
	// start of the bucket.
	Start metav1.Time `json:"start"`
	// count of leases created in it.
	Count int32 `json:"count"`
}

// ClusterPool keeps a set of warm clusters standing by to be leased.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cpool,categories=kobe
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Leased",type=integer,JSONPath=`.status.leased`
// +kubebuilder:printcolumn:name="Creating",type=integer,JSONPath=`.status.creating`
// +kubebuilder:printcolumn:name="Failures",type=integer,JSONPath=`.status.failures`
// +kubebuilder:printcolumn:name="Outdated",type=integer,JSONPath=`.status.outdated`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.templateRevision`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired pool.
	// +required
	Spec ClusterPoolSpec `json:"spec"`

	// status is the observed pool.
	// +optional
	Status ClusterPoolStatus `json:"status,omitempty"`
}

// ClusterPoolList is a list of ClusterPools.
// +kubebuilder:object:root=true
type ClusterPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPool `json:"items"`
}

func init() {
	register(&ClusterPool{}, &ClusterPoolList{})
}
