package kubernetes

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
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
		ControllerManager: "registry.k8s.io/kube-controller-manager:v1.37.2", Scheduler: "registry.k8s.io/kube-scheduler:v1.37.2",
		Node:       "ghcr.io/kunobi-ninja/kobe-node:dev",
		PullPolicy: corev1.PullIfNotPresent,
	}
	if img != want {
		t.Errorf("defaults %+v", img)
	}
	img, _ = ImagesFor(member("1.36.1", &kobev1.KubernetesBackendSpec{Images: &kobev1.KubernetesImages{
		APIServer: "mirror.example/apiserver:custom", Node: "mirror.example/node:1", PullPolicy: corev1.PullNever,
	}}))
	want = Images{
		Etcd: DefaultEtcdImage, APIServer: "mirror.example/apiserver:custom",
		ControllerManager: "registry.k8s.io/kube-controller-manager:v1.36.1", Scheduler: "registry.k8s.io/kube-scheduler:v1.36.1",
		Node: "mirror.example/node:1", PullPolicy: corev1.PullNever,
	}
	if img != want {
		t.Errorf("overrides %+v", img)
	}
}

func TestSchedulerImage(t *testing.T) {
	for in, want := range map[string]string{
		"mirror.example:5000/k8s/kube-apiserver:v1.37.2": "mirror.example:5000/k8s/kube-scheduler:v1.37.2",
		"mirror.example/kube-apiserver@sha256:abc":       "mirror.example/kube-scheduler:v1.37.2",
		"mirror.example/apiserver:custom":                "registry.k8s.io/kube-scheduler:v1.37.2",
		"registry.k8s.io/kube-apiserver:v1.37.2":         "registry.k8s.io/kube-scheduler:v1.37.2",
	} {
		if got := schedulerImage(in, "1.37.2"); got != want {
			t.Errorf("schedulerImage(%q) = %q, want %q", in, got, want)
		}
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
	for _, a := range []string{"--advertise-address=198.19.0.9", "--secure-port=6443", "--client-ca-file=/pki/client-ca.crt", "--etcd-servers=https://127.0.0.1:2379",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--admission-control-config-file=/pki/admission.yaml",
		"--kubelet-client-certificate=/pki/apiserver-kubelet-client.crt", "--kubelet-preferred-address-types=InternalIP",
		"--service-cluster-ip-range=198.19.240.0/24"} {
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
	assertStorage(t, pods[0])
	vols := map[string]corev1.Volume{}
	for _, v := range pods[0].Spec.Volumes {
		vols[v.Name] = v
	}
	quota := "--quota-backend-bytes=" + strconv.FormatInt(etcdQuota.Value(), 10)
	if data := vols["etcd-data"].EmptyDir; data == nil || data.SizeLimit.Cmp(etcdQuota) <= 0 || !slices.Contains(cs["etcd"].Args, quota) {
		t.Errorf("etcd's data directory %+v is not sized for its quota (%s): %v", data, quota, cs["etcd"].Args)
	}
	if got := cs["etcd"].Resources.Limits[corev1.ResourceEphemeralStorage]; got.Cmp(*vols["etcd-data"].EmptyDir.SizeLimit) <= 0 {
		t.Errorf("etcd's ephemeral-storage limit %s does not cover its data directory", got.String())
	}
	if _, err := (Template{}).Pods(incluster.RenderInput{Member: member("1.37", nil)}); err == nil {
		t.Error("pods rendered for an invalid version")
	}
}

// assertStorage checks that nothing in p can fill the host node's disk: every
// emptyDir has a sizeLimit, every container an ephemeral-storage request and
// limit, and no emptyDir may hold more than the pod (the sum of its
// containers' limits, which kubelet holds the pod's total to).
func assertStorage(t *testing.T, p corev1.Pod) {
	t.Helper()
	var limits resource.Quantity
	for _, c := range p.Spec.Containers {
		req, hasReq := c.Resources.Requests[corev1.ResourceEphemeralStorage]
		lim, hasLim := c.Resources.Limits[corev1.ResourceEphemeralStorage]
		if !hasReq || !hasLim || lim.Cmp(req) < 0 {
			t.Errorf("%s: container %s ephemeral-storage request %v limit %v", p.Name, c.Name, c.Resources.Requests, c.Resources.Limits)
		}
		limits.Add(lim)
	}
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		if v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
			t.Errorf("%s: emptyDir %s has no sizeLimit", p.Name, v.Name)
		} else if v.EmptyDir.SizeLimit.Cmp(limits) > 0 {
			t.Errorf("%s: emptyDir %s may hold %s, the pod %s", p.Name, v.Name, v.EmptyDir.SizeLimit.String(), limits.String())
		}
	}
}

func TestStorageOverrides(t *testing.T) {
	for _, tc := range []struct {
		name             string
		node             *corev1.ResourceRequirements
		wantReq, wantLim string
	}{
		{"defaults", nil, "1Gi", "10Gi"},
		{"larger disk", &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("40Gi")}}, "1Gi", "40Gi"},
		{"smaller disk", &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("512Mi")}}, "512Mi", "512Mi"},
		{"request only", &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("20Gi")}}, "20Gi", "20Gi"},
	} {
		m := member("", &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](1), Resources: &kobev1.KubernetesResources{Node: tc.node}})
		pods, err := Template{}.Pods(incluster.RenderInput{Member: m, ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: "/pki"})
		if err != nil {
			t.Fatal(err)
		}
		nc := pods[1].Spec.Containers[0]
		req, lim := nc.Resources.Requests[corev1.ResourceEphemeralStorage], nc.Resources.Limits[corev1.ResourceEphemeralStorage]
		if req.String() != tc.wantReq || lim.String() != tc.wantLim {
			t.Errorf("%s: node ephemeral-storage %s/%s, want %s/%s", tc.name, req.String(), lim.String(), tc.wantReq, tc.wantLim)
		}
		for _, v := range pods[1].Spec.Volumes {
			if v.Name == "data" && v.EmptyDir.SizeLimit.String() != tc.wantLim {
				t.Errorf("%s: the node's data emptyDir holds %s, its limit is %s", tc.name, v.EmptyDir.SizeLimit.String(), tc.wantLim)
			}
		}
		assertStorage(t, pods[1])
	}
}

func TestNodes(t *testing.T) {
	m := member("", &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](2), Resources: &kobev1.KubernetesResources{
		Node: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}},
	}})
	tpl := Template{NodeImage: "kobe.local/kobe-node:v1", NodePreload: []string{"/images/app.tar"}}
	set, err := tpl.Settings(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"kobe-pool-ci-0-node-0", "kobe-pool-ci-0-node-1"}; !slices.Equal(set.Nodes, want) || len(set.NodeConfigs) != 2 || !set.PKI.KubeletClient {
		t.Fatalf("settings %+v", set)
	}
	var c node.Config
	if err := json.Unmarshal(set.NodeConfigs[1], &c); err != nil {
		t.Fatal(err)
	}
	if c.Name != "kobe-pool-ci-0-node-1" || c.PodCIDR != "198.19.245.0/24" || c.ClusterCIDR != "198.19.244.0/22" || c.Interface != "" || c.CgroupParent != "" ||
		len(c.HideDirs) != 0 || !slices.Equal(c.Images, []string{NodePauseArchive, nodeDNSArchive, "/images/app.tar"}) || c.ClusterDNS != memberDNSIP || c.KubeletKubeconfig != "/etc/kobe/node/kubelet.kubeconfig" {
		t.Errorf("node config %+v", c)
	}
	inside := netip.MustParsePrefix(incluster.MemberNetwork)
	for _, r := range []string{c.PodCIDR, c.ClusterCIDR, incluster.MemberServiceCIDR} {
		if p := netip.MustParsePrefix(r); !inside.Contains(p.Addr()) || p.Bits() < inside.Bits() {
			t.Errorf("%s is not inside %s", r, inside)
		}
	}

	pods, err := tpl.Pods(incluster.RenderInput{Member: m, ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: "/pki"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 3 || pods[1].Name != "kobe-pool-ci-0-node-0" || pods[1].Labels[incluster.LabelComponent] != incluster.ComponentNode {
		t.Fatalf("pods %v", pods)
	}
	if cs := pods[0].Spec.Containers; len(cs) != 4 || cs[3].Name != "kube-scheduler" || cs[3].Image != "registry.k8s.io/kube-scheduler:v1.37.2" ||
		!slices.Contains(cs[3].Args, "--kubeconfig=/pki/scheduler.kubeconfig") || !set.PKI.Scheduler {
		t.Errorf("a member with nodes has no scheduler: %+v", cs)
	}
	nc := pods[2].Spec.Containers[0]
	if nc.Image != "kobe.local/kobe-node:v1" || !*nc.SecurityContext.Privileged || !strings.Contains(nc.Command[2], "/usr/local/bin/kobe-node --config /etc/kobe/node/node.json & pid=$!") ||
		!strings.Contains(nc.Command[2], "-s 198.19.244.0/22 ! -d 198.19.244.0/22 -j MASQUERADE") {
		t.Errorf("node container %+v", nc)
	}
	if got := nc.Resources.Limits[corev1.ResourceMemory]; got.String() != "3Gi" {
		t.Errorf("node memory limit %s", got.String())
	}
	if got := nc.Resources.Requests[corev1.ResourceCPU]; !got.Equal(DefaultResources.Node.Requests[corev1.ResourceCPU]) {
		t.Errorf("node cpu request %s", got.String())
	}
	mounts := map[string]string{}
	for _, vm := range nc.VolumeMounts {
		mounts[vm.MountPath] = vm.Name
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pods[2].Spec.Volumes {
		vols[v.Name] = v
	}
	for _, p := range pods {
		assertStorage(t, p)
	}
	if v, ok := vols[mounts["/var/lib/kobe-node"]]; !ok || v.EmptyDir == nil {
		t.Errorf("kobe-node's Dir is not on an emptyDir: %+v", v)
	}
	if mounts["/etc/kobe/node"] != incluster.PKIVolume { // the machinery adds the volume with the node's files
		t.Errorf("no node files at /etc/kobe/node: %v", mounts)
	}

	if _, err := tpl.Pods(incluster.RenderInput{Member: m, ClusterIP: "198.19.244.7", APIPort: APIPort, PKIDir: "/pki"}); err == nil ||
		!strings.Contains(err.Error(), incluster.MemberNetwork) {
		t.Errorf("a ClusterIP inside the member network: %v", err)
	}
	if pods, err := tpl.Pods(incluster.RenderInput{Member: member("", nil), ClusterIP: "198.19.244.7", APIPort: APIPort, PKIDir: "/pki"}); err != nil || len(pods) != 1 || len(pods[0].Spec.Containers) != 3 {
		t.Errorf("no nodes: %d pods (want one, without a scheduler), %v", len(pods), err)
	}
}

// TestPodSecurity checks the wiring of podsecurity's rendering (tested
// there, and against a real API server in its admissiontest package): the
// configuration and the policies are files of the PKI Secret, and the
// configuration names the directory the pod sees the policies in.
func TestPodSecurity(t *testing.T) {
	for _, level := range []kobev1.PodSecurityLevel{"", kobev1.PodSecurityPrivileged, kobev1.PodSecurityBaseline, kobev1.PodSecurityRestricted} {
		for _, nv := range []kobev1.NetworkVolumePolicy{"", kobev1.NetworkVolumesAllowed} {
			m := member("", nil)
			m.Spec.Cluster.PodSecurity = level
			m.Spec.Cluster.NetworkVolumes = nv
			set, err := Template{}.Settings(m)
			if err != nil {
				t.Fatal(err)
			}
			config, policies, err := podsecurity.Render(m.Spec.Cluster, "/etc/kobe/pki/admission-policies")
			if err != nil {
				t.Fatal(err)
			}
			if string(set.Files[admissionFile]) != string(config) {
				t.Errorf("%q, %q: configuration\n%s\nwant\n%s", level, nv, set.Files[admissionFile], config)
			}
			// A privileged member that allows network volumes has no
			// policy of podsecurity's.
			if policies == nil {
				if level != kobev1.PodSecurityPrivileged || nv != kobev1.NetworkVolumesAllowed {
					t.Errorf("%q, %q: no policies", level, nv)
				}
				if _, ok := set.Files[admissionPolicyFile]; ok || set.FilePaths != nil {
					t.Errorf("%q, %q: policies are configured: %v", level, nv, set.FilePaths)
				}
				continue
			}
			if string(set.Files[admissionPolicyFile]) != string(policies) || set.FilePaths[admissionPolicyFile] != "admission-policies/pod-security.yaml" ||
				!strings.Contains(string(config), "staticManifestsDir: /etc/kobe/pki/admission-policies") {
				t.Errorf("%q, %q: the policies are not wired: %v\n%s", level, nv, set.FilePaths, set.Files[admissionPolicyFile])
			}
		}
	}
	m := member("", nil)
	m.Spec.Cluster.PodSecurity = "lax"
	if _, err := (Template{}).Settings(m); err == nil || !strings.Contains(err.Error(), "spec.cluster.podSecurity") {
		t.Errorf("unknown level: %v", err)
	}
}

func TestMemberDNSIP(t *testing.T) {
	ip, err := clusterdns.ServiceIP(netip.MustParsePrefix(incluster.MemberServiceCIDR))
	if err != nil || ip.String() != memberDNSIP {
		t.Fatalf("clusterdns.ServiceIP(%s) = %v, %v; the node pods' kubelets use %s", incluster.MemberServiceCIDR, ip, err, memberDNSIP)
	}
}

// A member's API server loads kobe's static admission policies at every
// version it may run: 1.36 behind its feature gate, nothing older.
func TestVersionFlags(t *testing.T) {
	apiserverArgs := func(v string) (string, error) {
		pods, err := Template{}.Pods(incluster.RenderInput{Member: member(v, nil), ClusterIP: "198.19.0.9", APIPort: APIPort, PKIDir: "/pki"})
		if err != nil {
			return "", err
		}
		for _, c := range pods[0].Spec.Containers {
			if c.Name == "kube-apiserver" {
				return strings.Join(c.Args, " "), nil
			}
		}
		return "", nil
	}
	if args, err := apiserverArgs("1.36.3"); err != nil || !strings.Contains(args, "--feature-gates=ManifestBasedAdmissionControlConfig=true") {
		t.Errorf("1.36.3: %v, args %s", err, args)
	}
	if args, err := apiserverArgs("1.37.2"); err != nil || strings.Contains(args, "--feature-gates") {
		t.Errorf("1.37.2: %v, args %s", err, args)
	}
	for _, render := range []func() error{
		func() error { _, err := apiserverArgs("1.35.4"); return err },
		func() error { _, err := (Template{}).Settings(member("1.35.4", nil)); return err },
	} {
		if err := render(); err == nil || !strings.Contains(err.Error(), "cannot load the static admission policies") {
			t.Errorf("a 1.35 member rendered: %v", err)
		}
	}
}

// Node pods never run a kubelet newer than the member's API server.
func TestNodeSkew(t *testing.T) {
	nodes := func(img string) *kobev1.KubernetesBackendSpec {
		k := &kobev1.KubernetesBackendSpec{Nodes: ptr.To[int32](1)}
		if img != "" {
			k.Images = &kobev1.KubernetesImages{Node: img}
		}
		return k
	}
	for _, tc := range []struct {
		name string
		m    backend.Member
		ok   bool
	}{
		{"the default version", member("", nodes("")), true},
		{"an older minor with kobe's node image", member("1.36.3", nodes("")), false},
		{"an older minor with its own node image", member("1.36.3", nodes("registry.example/kobe-node:1.36.3")), true},
		{"an older minor without nodes", member("1.36.3", &kobev1.KubernetesBackendSpec{}), true},
	} {
		_, err := (Template{}).Settings(tc.m)
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "images.node") {
			t.Errorf("%s: Settings = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestDefaultNodes(t *testing.T) {
	pool := func(version, nodeImage string) *kobev1.ClusterPoolSpec {
		s := &kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes}, Cluster: kobev1.ClusterTemplate{Version: version}}
		if nodeImage != "" {
			s.Backend.Kubernetes = &kobev1.KubernetesBackendSpec{Images: &kobev1.KubernetesImages{Node: nodeImage}}
		}
		return s
	}
	for _, tc := range []struct {
		name string
		d    backend.NodesDefault
		spec *kobev1.ClusterPoolSpec
		want int32
		why  string
	}{
		{"auto: one node pod", backend.NodesDefault{Auto: true}, pool("", ""), 1, ""},
		{"a count", backend.NodesDefault{Count: 2}, pool("", ""), 2, ""},
		{"0 says whose choice it is", backend.NodesDefault{}, pool("", ""), 0, "--kubernetes-default-nodes is 0"},
		{"an older minor without its node image gets none, and why", backend.NodesDefault{Auto: true}, pool("1.36.3", ""), 0, "images.node"},
		{"an older minor with its node image", backend.NodesDefault{Auto: true}, pool("1.36.3", "registry.example/kobe-node:1.36.3"), 1, ""},
	} {
		n, why := defaultNodes(tc.d, tc.spec)
		if n != tc.want || !strings.Contains(why, tc.why) || (tc.want > 0) != (why == "") {
			t.Errorf("%s: defaultNodes = %d, %q; want %d, %q", tc.name, n, why, tc.want, tc.why)
		}
	}
	// The backend answers through backend.NodeDefaulter.
	b, err := New(Options{Client: fake.NewClientBuilder().Build(), Namespace: "kobe-system", OperatorSelector: map[string]string{"app": "kobe"}, DefaultNodes: backend.NodesDefault{Count: 3}})
	if err != nil {
		t.Fatal(err)
	}
	var d backend.NodeDefaulter = b
	if n, _ := d.DefaultNodes(pool("", "")); n != 3 {
		t.Errorf("the backend's DefaultNodes = %d, want the option's 3", n)
	}
}
