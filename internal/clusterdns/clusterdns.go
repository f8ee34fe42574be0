// Package clusterdns is the cluster DNS of members with nodes: CoreDNS
// (images/coredns, preloaded into every node as Archive) serving
// Domain from the member's Services and pods, reachable at ServiceIP of
// the member's Service range, which every node's kubelet hands its pods as
// their nameserver. The objects are created in the member by the
// DNSHealthy readiness gate (internal/gates) before the member is Ready;
// the backends set the kubelet side (docs/nodes.md, "Cluster DNS").
package clusterdns

import (
	"fmt"
	"net/netip"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// Image is the CoreDNS image `make image-coredns` builds; its tag is
	// the CoreDNS module version of images/coredns/go.mod.
	Image = "kobe.local/coredns:v1.15.0"
	// Archive is that image's file name in the image directory (the local
	// backend's --local-image-dir, the node image's image directory).
	Archive = "coredns.tar"
	// Domain is the members' cluster domain.
	Domain = "cluster.local"
	// Namespace holds the DNS objects, where Kubernetes distributions
	// keep them.
	Namespace = metav1.NamespaceSystem
	// Name is the CoreDNS Deployment's, ConfigMap's, ServiceAccount's name.
	Name = "coredns"
	// ServiceName is the DNS Service's conventional name: charts and tests
	// look for kube-dns in kube-system.
	ServiceName = "kube-dns"
	// clusterRole reads what CoreDNS's kubernetes plugin serves.
	clusterRole = "system:coredns"
	// port is where CoreDNS listens in its pod: above 1024, so that it
	// runs as non-root without capabilities (Pod Security restricted);
	// the Service maps 53 to it.
	port = 1053
)

// appLabels select the CoreDNS pods; k8s-app=kube-dns is the label charts
// and the upstream e2e suite expect.
var appLabels = map[string]string{"k8s-app": "kube-dns"}

// ServiceIP is the DNS Service's address in a member's Service range: its
// tenth address, as kubeadm chooses. The
// backends give it to every node's kubelet (clusterDNS) and the gate
// creates the Service there; the API server's own "kubernetes" Service
// takes the first.
func ServiceIP(serviceRange netip.Prefix) (netip.Addr, error) {
	if !serviceRange.Addr().Is4() || serviceRange.Bits() > 28 {
		return netip.Addr{}, fmt.Errorf("service range %s: want an IPv4 range of at least 16 addresses", serviceRange)
	}
	a := serviceRange.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a, nil
}

// Corefile serves Domain and the reverse zones from the member's API, and
// nothing else: no forward plugin, so a name outside the member fails at
// once instead of a query leaving the machine (a member's egress may
// allow no DNS server). health and ready answer kubelet's probes.
func Corefile() string {
	return fmt.Sprintf(`.:%d {
    errors
    health :8080 {
        lameduck 3s
    }
    ready :8181
    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loop
    reload
    loadbalance
}
`, port, Domain)
}

// Objects are what a member's DNS consists of, in creation order: the
// ServiceAccount and its read-only RBAC, the Corefile, the Service at ip and
// the Deployment of image.
func Objects(ip netip.Addr, image string) []client.Object {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: appLabels}
	}
	read := []string{"list", "watch"}
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: meta(Name)},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRole, Labels: appLabels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: read},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRole, Labels: appLabels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: Name, Namespace: Namespace}},
		},
		&corev1.ConfigMap{ObjectMeta: meta(Name), Data: map[string]string{"Corefile": Corefile()}},
		&corev1.Service{
			ObjectMeta: meta(ServiceName),
			Spec: corev1.ServiceSpec{
				ClusterIP: ip.String(),
				Selector:  appLabels,
				Ports: []corev1.ServicePort{
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(port)},
					{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(port)},
				},
			},
		},
		deployment(image),
	}
}

// deployment runs one CoreDNS replica (members are small and short-lived;
// a lease holder who wants more scales it), passing Pod Security
// restricted, the strictest level a pool may set.
func deployment(image string) *appsv1.Deployment {
	httpProbe := func(path string, p int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(p)}},
			PeriodSeconds: 1, FailureThreshold: 3,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace, Labels: appLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: appLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName: Name,
					PriorityClassName:  "system-cluster-critical",
					// Default: CoreDNS must not resolve through itself.
					DNSPolicy:       corev1.DNSDefault,
					Tolerations:     []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					SecurityContext: restrictedPod(),
					Containers: []corev1.Container{{
						Name:  "coredns",
						Image: image,
						// Never: the image is preloaded on every node and
						// nothing is pulled from outside the machine.
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-conf", "/etc/coredns/Corefile"},
						// As the member's other Go daemons: a smaller heap
						// for a server that answers a test cluster's names.
						Env: []corev1.EnvVar{{Name: "GOGC", Value: "50"}},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: port, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: port, Protocol: corev1.ProtocolTCP},
						},
						ReadinessProbe: httpProbe("/ready", 8181),
						LivenessProbe:  httpProbe("/health", 8080),
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
						},
						VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						SecurityContext: restrictedContainer(),
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: Name}},
					}}},
				},
			},
		},
	}
}

// ProbeNames are what the DNSHealthy probe pod resolves: the API server's
// Service by its short name (the search path works) and the DNS Service by
// its full name.
var ProbeNames = []string{"kubernetes.default", ServiceName + "." + Namespace + ".svc." + Domain + "."}

// ProbePodName is the DNSHealthy probe pod's name, in Namespace.
const ProbePodName = "kobe-dns-probe"

// ProbeResolved tells from the probe pod's log whether it resolved every
// one of ProbeNames: the probe (images/coredns, probe.go) prints one line
// "NAME: [ADDRESS ...]" per name it resolved, errors go to stderr as
// "NAME: ERROR". Reading the log tells of success as soon as it is printed,
// where the pod's phase waits for the kubelet to notice the exit (its
// relist runs once a second).
func ProbeResolved(log string) bool {
	resolved := map[string]bool{}
	for _, line := range strings.Split(log, "\n") {
		name, addrs, ok := strings.Cut(line, ": [")
		if ok && strings.HasSuffix(addrs, "]") && len(addrs) > 1 {
			resolved[name] = true
		}
	}
	for _, n := range ProbeNames {
		if !resolved[n] {
			return false
		}
	}
	return true
}

// ProbePod resolves ProbeNames with the pod's cluster DNS settings, once,
// from a pod placed by the scheduler (so across the member's pod network),
// passing Pod Security restricted.
func ProbePod(image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ProbePodName, Namespace: Namespace, Labels: map[string]string{"kobe.kunobi.ninja/dns-probe": "true"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			RestartPolicy:                 corev1.RestartPolicyNever,
			DNSPolicy:                     corev1.DNSClusterFirst,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			SecurityContext:               restrictedPod(),
			Containers: []corev1.Container{{
				Name:            "probe",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Command:         append([]string{"/coredns", "probe"}, ProbeNames...),
				// The lookup errors become the pod's status message.
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext:          restrictedContainer(),
			}},
		},
	}
}

// restrictedPod and restrictedContainer are the security contexts of the
// DNS pods: Pod Security restricted, the strictest level a pool may set,
// as the image's non-root user.
func restrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65532),
		RunAsGroup:     ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}
