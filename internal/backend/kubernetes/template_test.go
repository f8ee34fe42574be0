package kubernetes

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
)

func member(version string, k *kobev1.KubernetesBackendSpec) backend.Member {
	m := backend.Member{Namespace: "kobe", Name: "pool-ci-0", UID: "u", Pool: "ci"}
	m.Spec.Cluster.Version = version
	m.Spec.Backend = kobev1.BackendSpec{Type: kobev1.BackendKubernetes, Kubernetes: k}
	return m
}

func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", DefaultVersion, true},
		{"1.37.2", "1.37.2", true},
		{"v1.36.0", "1.36.0", true},
		{"1.37", "", false},
		{"1", "", false},
		{"latest", "", false},
		{"1.37.2-rc.0", "", false},
		{"1.37.x", "", false},
		{"01.37.2", "", false},
		{"1.37.2 ", "", false},
		{"1.37.2/../x", "", false},
	} {
		got, err := Version(member(tc.in, nil))
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("Version(%q) = %q, %v", tc.in, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), "spec.cluster.version") {
			t.Errorf("error %q does not name the field", err)
		}
		if _, serr := (Template{}).Settings(member(tc.in, nil)); (serr == nil) != tc.ok {
			t.Errorf("Settings(%q): %v", tc.in, serr)
		}
	}
}

func TestImages(t *testing.T) {
	img, err := ImagesFor(member("", nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Images{
		Etcd: "registry.k8s.io/etcd:3.6.16-0", APIServer: "registry.k8s.io/kube-apiserver:v1.37.2",
		ControllerManager: "registry.k8s.io/kube-controller-manager:v1.37.2", PullPolicy: corev1.PullIfNotPresent,
	}
	if img != want {
		t.Errorf("defaults %+v", img)
	}
	img, _ = ImagesFor(member("1.36.1", &kobev1.KubernetesBackendSpec{Images: &kobev1.KubernetesImages{
		APIServer: "mirror.example/apiserver:custom", PullPolicy: corev1.PullNever,
	}}))
	want = Images{
		Etcd: DefaultEtcdImage, APIServer: "mirror.example/apiserver:custom",
		ControllerManager: "registry.k8s.io/kube-controller-manager:v1.36.1", PullPolicy: corev1.PullNever,
	}
	if img != want {
		t.Errorf("overrides %+v", img)
	}
}

func TestSettings(t *testing.T) {
	m := member("", &kobev1.KubernetesBackendSpec{Placement: &kobev1.Placement{PriorityClassName: "p"}})
	set, err := Template{}.Settings(m)
	if err != nil || set.APIPort != APIPort || !set.PKI.Etcd || !set.PKI.ControllerManager || set.Placement.PriorityClassName != "p" {
		t.Errorf("settings %+v %v", set, err)
	}
	m.Spec.Cluster.Servers = ptr.To[int32](3)
	if _, err := (Template{}).Settings(m); err == nil || !strings.Contains(err.Error(), "spec.cluster.servers") {
		t.Errorf("three servers: %v", err)
	}
}

func TestPods(t *testing.T) {
	m := member("", &kobev1.KubernetesBackendSpec{Resources: &kobev1.KubernetesResources{
		Etcd: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}},
	}})
	pods, err := Template{}.Pods(incluster.RenderInput{Member: m, ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: "/pki"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Name != "kobe-pool-ci-0-server-0" {
		t.Fatalf("pods %v", pods)
	}
	cs := map[string]corev1.Container{}
	for _, c := range pods[0].Spec.Containers {
		cs[c.Name] = c
		if !strings.HasPrefix(c.Command[0], "/usr/local/bin/") || c.LivenessProbe != nil {
			t.Errorf("%s: command %v liveness %v", c.Name, c.Command, c.LivenessProbe)
		}
	}
	api := cs["kube-apiserver"]
	for _, a := range []string{"--advertise-address=198.19.0.9", "--secure-port=6443", "--client-ca-file=/pki/client-ca.crt", "--etcd-servers=https://127.0.0.1:2379"} {
		if !slices.Contains(api.Args, a) {
			t.Errorf("kube-apiserver lacks %s: %v", a, api.Args)
		}
	}
	rp := api.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Scheme != corev1.URISchemeHTTPS || rp.HTTPGet.Port.IntVal != APIPort {
		t.Errorf("readiness %+v", rp)
	}
	if !slices.Contains(cs["etcd"].Args, "--client-cert-auth=true") || !slices.Contains(cs["etcd"].Args, "--listen-client-urls=https://127.0.0.1:2379") {
		t.Errorf("etcd args %v", cs["etcd"].Args)
	}
	if got := cs["etcd"].Resources.Limits[corev1.ResourceMemory]; got.String() != "2Gi" {
		t.Errorf("etcd memory limit %s", got.String())
	}
	if got := cs["kube-controller-manager"].Resources.Requests[corev1.ResourceCPU]; !got.Equal(DefaultResources.ControllerManager.Requests[corev1.ResourceCPU]) {
		t.Errorf("controller manager cpu request %s", got.String())
	}
	if _, err := (Template{}).Pods(incluster.RenderInput{Member: member("1.37", nil)}); err == nil {
		t.Error("pods rendered for an invalid version")
	}
}
