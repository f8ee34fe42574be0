package netpolprobe

import (
	"fmt"
	"net"
	"path"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Labels of the probe's objects.
const (
	// LabelProbe ("true") marks every object of a probe: cleanup finds
	// them by it.
	LabelProbe = "kobe.kunobi.ninja/netpol-probe"
	// LabelRun is the run an object belongs to.
	LabelRun = "kobe.kunobi.ninja/netpol-probe-run"
	// LabelRole is listener, control or probe.
	LabelRole = "kobe.kunobi.ninja/netpol-probe-role"
)

const (
	roleListener = "listener"
	roleControl  = "control"
	roleProbe    = "probe"
	// etcdBinDir is where the etcd image has etcd and etcdctl (the
	// kubernetes backend's images must have them there too).
	etcdBinDir = "/usr/local/bin"
	clientPort = 2379
	// probeUser runs every container (as member pods do).
	probeUser = 65532
)

// objects renders one run's policy and pods.
type objects struct {
	namespace, run, image string
	pull                  corev1.PullPolicy
	deadline              time.Duration
	owner                 *metav1.OwnerReference
}

// meta is the metadata of one of the run's objects.
func (o objects) meta(name, role string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{GenerateName: name, Namespace: o.namespace, Labels: o.labels(role)}
	if o.owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{*o.owner}
	}
	return m
}

func (o objects) labels(role string) map[string]string {
	return map[string]string{LabelProbe: "true", LabelRun: o.run, LabelRole: role}
}

// policy denies the probe pod every connection, both ways.
func (o objects) policy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: o.meta("kobe-netpol-probe-", roleProbe),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: o.labels(roleProbe)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// listener is a lone etcd serving plain HTTP on every address; its
// readiness (kubelet's GET /health) says it accepts connections.
func (o objects) listener() *corev1.Pod {
	local := "http://127.0.0.1"
	pod := o.pod(roleListener, corev1.Container{
		Command: []string{path.Join(etcdBinDir, "etcd")},
		Args: []string{
			"--name=probe", "--data-dir=/var/lib/etcd/probe",
			fmt.Sprintf("--listen-client-urls=http://0.0.0.0:%d", clientPort),
			fmt.Sprintf("--advertise-client-urls=%s:%d", local, clientPort),
			"--listen-peer-urls=" + local + ":2380", "--initial-advertise-peer-urls=" + local + ":2380",
			"--initial-cluster=probe=" + local + ":2380", "--listen-metrics-urls=" + local + ":2381",
			"--log-level=warn",
		},
		Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: clientPort, Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(clientPort)}},
			PeriodSeconds: 1, FailureThreshold: 3,
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
	})
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("64Mi"))},
	}}}
	return pod
}

// client asks the listener at ip for its health once; the exit code is
// the answer.
func (o objects) client(role, ip string) *corev1.Pod {
	return o.pod(role, corev1.Container{
		Command: []string{path.Join(etcdBinDir, "etcdctl")},
		Args: []string{
			"--endpoints=http://" + net.JoinHostPort(ip, fmt.Sprint(clientPort)),
			"--dial-timeout=3s", "--command-timeout=5s", "endpoint", "health",
		},
	})
}

// pod is a probe pod that Pod Security restricted admits, which never
// restarts and ends by itself at the run's deadline.
func (o objects) pod(role string, c corev1.Container) *corev1.Pod {
	c.Name, c.Image, c.ImagePullPolicy = role, o.image, o.pull
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("16Mi")},
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("128Mi")},
	}
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return &corev1.Pod{
		ObjectMeta: o.meta("kobe-netpol-probe-"+role+"-", role),
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         ptr.To(max(1, int64(o.deadline.Seconds()))),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](probeUser), RunAsGroup: ptr.To[int64](probeUser),
				FSGroup: ptr.To[int64](probeUser), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
}
