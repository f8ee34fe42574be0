//go:build root

package lifecycle_test

import (
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	kubebackend "github.com/kunobi-ninja/kobe/internal/backend/kubernetes"
)

// minimalTemplate is a second template written only against incluster's
// API, the way k3s and k0s will be: etcd (plain, on the pod's loopback) and
// kube-apiserver in one pod, on another port, without etcd certificates or
// a controller manager. That it passes the same lifecycle as the kubernetes
// template is what shows the machinery is the shared part.
type minimalTemplate struct{}

const minimalPort int32 = 7443

func (minimalTemplate) Settings(m backend.Member) (incluster.Settings, error) {
	return incluster.Settings{APIPort: minimalPort, Placement: placementOf(m)}, nil
}

func placementOf(m backend.Member) *kobev1.Placement {
	if k := m.Spec.Backend.Kubernetes; k != nil {
		return k.Placement
	}
	return nil
}

func (minimalTemplate) Pods(in incluster.RenderInput) ([]corev1.Pod, error) {
	img, err := kubebackend.ImagesFor(in.Member)
	if err != nil {
		return nil, err
	}
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("48Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("768Mi")},
	}
	pki := func(k string) string { return path.Join(in.PKIDir, k) }
	pod := corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "etcd", Image: img.Etcd, ImagePullPolicy: img.PullPolicy,
			Command: []string{"/usr/local/bin/etcd"},
			Args: []string{"--data-dir=/data", "--listen-client-urls=http://127.0.0.1:12379",
				"--advertise-client-urls=http://127.0.0.1:12379", "--listen-peer-urls=http://127.0.0.1:12380",
				"--initial-advertise-peer-urls=http://127.0.0.1:12380", "--initial-cluster=default=http://127.0.0.1:12380"},
			Resources:    res,
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
		}, {
			Name: "apiserver", Image: img.APIServer, ImagePullPolicy: img.PullPolicy,
			Command: []string{"/usr/local/bin/kube-apiserver"},
			Args: []string{"--etcd-servers=http://127.0.0.1:12379", fmt.Sprintf("--secure-port=%d", in.APIPort),
				"--advertise-address=" + in.ClusterIP,
				"--tls-cert-file=" + pki(incluster.KeyServingCert), "--tls-private-key-file=" + pki(incluster.KeyServingKey),
				"--client-ca-file=" + pki(incluster.KeyClientCACert),
				"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + pki(incluster.KeySAPub),
				"--service-account-signing-key-file=" + pki(incluster.KeySAKey), "--authorization-mode=RBAC",
				"--service-cluster-ip-range=" + incluster.MemberServiceCIDR},
			Resources: res,
			VolumeMounts: []corev1.VolumeMount{{Name: incluster.PKIVolume, MountPath: in.PKIDir, ReadOnly: true},
				{Name: "tmp", MountPath: "/tmp"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz", Port: intstr.FromInt32(in.APIPort), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 2},
		}},
		Volumes: []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}}
	return []corev1.Pod{pod}, nil
}
