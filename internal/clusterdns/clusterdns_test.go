package clusterdns

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestServiceIP(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"198.19.128.0/24", "198.19.128.10", ""},
		{"198.19.240.0/24", "198.19.240.10", ""},
		{"10.96.0.0/12", "10.96.0.10", ""},
		{"198.19.128.7/24", "198.19.128.10", ""}, // masked first
		{"198.19.128.0/29", "", "at least 16 addresses"},
		{"fd00::/64", "", "IPv4"},
	} {
		got, err := ServiceIP(netip.MustParsePrefix(tc.in))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ServiceIP(%s) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got.String() != tc.want):
			t.Errorf("ServiceIP(%s) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// The image the gate deploys is the one make image-coredns builds: its tag
// is the CoreDNS version that images/coredns requires.
func TestImageMatchesTheModule(t *testing.T) {
	path := filepath.Join("..", "..", "images", "coredns", "go.mod")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.ParseLax(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Require {
		if r.Mod.Path == "github.com/coredns/coredns" {
			if want := "kobe.local/coredns:" + r.Mod.Version; Image != want {
				t.Fatalf("Image = %s, but images/coredns builds %s", Image, want)
			}
			return
		}
	}
	t.Fatalf("%s requires no github.com/coredns/coredns", path)
}

// A member's DNS answers for the member only: no forward plugin, whose
// upstreams would be off the machine.
func TestCorefileServesTheMemberOnly(t *testing.T) {
	c := Corefile()
	for _, want := range []string{".:1053 {", "kubernetes cluster.local in-addr.arpa ip6.arpa", "ready :8181", "health :8080"} {
		if !strings.Contains(c, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "forward") {
		t.Errorf("Corefile forwards:\n%s", c)
	}
}

// restricted checks what Pod Security restricted asks of a pod spec, the
// strictest level a pool may set: the DNS pods must run in every member.
func restricted(t *testing.T, what string, s corev1.PodSpec) {
	t.Helper()
	sc := s.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod security context %+v", what, sc)
	}
	if s.HostNetwork || s.HostPID || s.HostIPC {
		t.Errorf("%s shares a host namespace", what)
	}
	for _, c := range s.Containers {
		csc := c.SecurityContext
		if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.Capabilities == nil ||
			len(csc.Capabilities.Add) != 0 || len(csc.Capabilities.Drop) != 1 || csc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s container %s: security context %+v", what, c.Name, csc)
		}
		if c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("%s container %s pulls (%s): the image is preloaded", what, c.Name, c.ImagePullPolicy)
		}
		for _, p := range c.Ports {
			if p.ContainerPort < 1024 || p.HostPort != 0 {
				t.Errorf("%s container %s port %+v needs a capability or the host", what, c.Name, p)
			}
		}
	}
	for _, v := range s.Volumes {
		if v.ConfigMap == nil {
			t.Errorf("%s volume %s is not a ConfigMap", what, v.Name)
		}
	}
}

func TestObjects(t *testing.T) {
	objs := Objects(netip.MustParseAddr("198.19.128.10"), "img:1")
	var svc *corev1.Service
	var dep *appsv1.Deployment
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			svc = o
		case *appsv1.Deployment:
			dep = o
		}
	}
	if svc == nil || dep == nil {
		t.Fatalf("objects %v lack the Service or the Deployment", objs)
	}
	if svc.Name != "kube-dns" || svc.Namespace != "kube-system" || svc.Spec.ClusterIP != "198.19.128.10" || len(svc.Spec.Ports) != 2 ||
		svc.Spec.Ports[0].Port != 53 || svc.Spec.Ports[0].TargetPort.IntVal != port || svc.Spec.Selector["k8s-app"] != "kube-dns" {
		t.Errorf("Service %+v", svc)
	}
	if dep.Spec.Template.Labels["k8s-app"] != "kube-dns" || dep.Spec.Template.Spec.Containers[0].Image != "img:1" ||
		dep.Spec.Template.Spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("Deployment %+v", dep.Spec.Template)
	}
	restricted(t, "CoreDNS", dep.Spec.Template.Spec)
	p := ProbePod("img:1")
	restricted(t, "the probe", p.Spec)
	if p.Spec.DNSPolicy != corev1.DNSClusterFirst || p.Spec.NodeName != "" || p.Spec.Containers[0].Command[1] != "probe" {
		t.Errorf("probe pod %+v", p.Spec)
	}
}
