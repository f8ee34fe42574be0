package incluster

import (
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
}

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

// PodName names the member's i-th pod.
func (in RenderInput) PodName(i int) string {
	return podName(in.Member, i)
}
