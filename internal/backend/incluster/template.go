package incluster

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// Template is what differs between in-cluster backends: the pods that run a
// member's control plane. The machinery calls Settings first (it may refuse
// the member's spec), then Pods once the member's Service has its ClusterIP
// and its PKI Secret exists.
type Template interface {
	// Settings checks the member's spec and says what the machinery needs
	// to know before rendering: the API port, the PKI and the placement. An
	// error names the spec field at fault; Create returns it.
	Settings(m backend.Member) (Settings, error)

	// Pods renders the member's pods. Every pod serves the member's API on
	// Settings.APIPort and mounts the PKI Secret's volume (PKIVolume) where
	// it needs it. Each container must carry CPU and memory requests and
	// limits. The machinery sets names it does not (in.PodName), the
	// namespace, labels, owner, placement, the PKI volume and the pod- and
	// container-level security settings.
	Pods(in RenderInput) ([]corev1.Pod, error)
}

// Settings is what a Template tells the machinery about one member.
type Settings struct {
	// APIPort is the port the member's kube-apiserver serves on, in its
	// pods and on its Service.
	APIPort int32
	// PKI says which optional parts of the PKI the pods need.
	PKI PKINeeds
	// Placement of the member's pods; nil places them anywhere, spread
	// across nodes.
	Placement *kobev1.Placement
	// Files are non-secret files the pods need (an admission
	// configuration, a node's config), added to the PKI Secret under their
	// keys when it is made: control-plane pods see them in PKIDir beside
	// the PKI. They must be the same on every call (the Secret is made
	// once). Keys must not start with "node-" (the node pods' own keys).
	Files map[string][]byte
	// FilePaths puts a file of Files at another path under PKIDir than its
	// key (in a directory of its own, say); the default is the key.
	FilePaths map[string]string
	// Nodes are the names of the member's node pods (NodePodName), which
	// are also their node names in the member. For each, the machinery
	// issues from the member's client CA a kubelet client certificate
	// (system:node:<name> in system:nodes), a kubelet serving certificate
	// and a kube-proxy client certificate (system:kube-proxy), with
	// kubeconfigs for https://<ClusterIP>:<APIPort>; a node pod mounts
	// only its own (NodeFiles) and the client CA.
	Nodes []string
	// NodeConfigs[i] is a file given to node pod i as NodeConfigFile.
	NodeConfigs [][]byte
}

// PKINeeds selects the optional parts of a member's PKI. The server CA,
// serving certificate, client CA, admin kubeconfig and ServiceAccount key
// pair are always made.
type PKINeeds struct {
	// Etcd: an etcd CA, etcd's serving certificate (127.0.0.1, localhost)
	// and the API server's etcd client certificate.
	Etcd bool
	// ControllerManager: a kubeconfig for kube-controller-manager
	// (system:kube-controller-manager) pointing at https://127.0.0.1:<port>.
	ControllerManager bool
	// Scheduler: a kubeconfig for kube-scheduler (system:kube-scheduler)
	// pointing at https://127.0.0.1:<port>.
	Scheduler bool
	// KubeletClient: the API server's client certificate for kubelets
	// (KeyKubeletClientCert, in system:masters), for logs, exec and
	// port-forward on node pods.
	KubeletClient bool
	// Egress, for a member with nodes: the API server's way into its
	// member's network, through the egress proxy of its node pods
	// (internal/node, egressproxy.go). The machinery makes a Service of
	// the node pods on node.EgressProxyPort (EgressServiceName), names its
	// address EgressHost in the control-plane pods (a host alias), and
	// issues the channel's PKI from a CA of its own: the API server's
	// client certificate and the CA (KeyEgressCACert,
	// KeyEgressClientCert, KeyEgressClientKey) for the control-plane pods,
	// and for each node pod a serving certificate for EgressHost and the
	// CA (NodeEgressCert, NodeEgressKey, NodeEgressCACert). The template
	// points the API server's "cluster" egress at
	// https://EgressHost:node.EgressProxyPort and configures the proxies.
	Egress bool
}

// EgressHost is the name of the member's egress proxies in its
// control-plane pods (a host alias of the egress Service's address) and in
// their serving certificates. In a reserved domain: it names nothing else.
const EgressHost = "egress-proxy.kobe.invalid"

// RenderInput is what a Template renders pods from.
type RenderInput struct {
	Member backend.Member
	// ClusterIP is the member's Service address: the API server's
	// advertise address and the Endpoint callers use.
	ClusterIP string
	// APIPort is Settings.APIPort.
	APIPort int32
	// PKIDir is where PKIVolume is to be mounted; the files are the PKI
	// Secret's keys (KeyServerCACert, ...), without the client CA's key and
	// the admin kubeconfig, which never reach a pod.
	PKIDir string
}

// PodName names the member's i-th control-plane pod.
func (in RenderInput) PodName(i int) string {
	return podName(in.Member, i)
}

// NodePodName names the member's i-th node pod, which is also the node's
// name in the member.
func NodePodName(m backend.Member, i int) string {
	return baseName(m) + "-node-" + strconv.Itoa(i)
}

// ComponentNode is the LabelComponent value a template sets on node pods:
// the machinery then keeps the pod's own security settings (a node pod is
// privileged), mounts at NodeDir only the node's files (NodeFiles), and
// knows the pod by its name (NodePodName).
const ComponentNode = "node"

// NodeDir is where a node pod sees its files.
const NodeDir = "/etc/kobe/node"

// Files of a node pod in NodeDir.
const (
	NodeConfigFile          = "node.json"
	NodeKubeletKubeconfig   = "kubelet.kubeconfig"
	NodeKubeProxyKubeconfig = "kube-proxy.kubeconfig"
	NodeKubeletCert         = "kubelet.crt"
	NodeKubeletKey          = "kubelet.key"
	NodeClientCACert        = "client-ca.crt"
	// NodeEgressCert and NodeEgressKey are the node's egress proxy's
	// serving certificate (PKINeeds.Egress), NodeEgressCACert the egress
	// CA, whose API server certificate is the only client it accepts.
	NodeEgressCert   = "egress-proxy.crt"
	NodeEgressKey    = "egress-proxy.key"
	NodeEgressCACert = "egress-ca.crt"
	// NodeOverlayKey is the member's overlay key (node.Config
	// OverlayKeyFile): random, the same for every node of the member, in
	// no other member's pods nor the member's API.
	NodeOverlayKey = "overlay.key"
)

// nodeKey is the PKI Secret key of node i's file.
func nodeKey(i int, file string) string {
	return "node-" + strconv.Itoa(i) + "-" + file
}
