//go:build integration

package admissiontest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const (
	enforce        = "pod-security.kubernetes.io/enforce"
	enforceVersion = "pod-security.kubernetes.io/enforce-version"
)

var fx struct {
	env *testenv.Env
	cs  *kubernetes.Clientset
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts one API server with the admission configuration of a member
// of a pool that sets nothing (baseline, network volumes refused), as the
// backends write it.
func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kobe-podsecurity-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	env, cs, stop, err := startMember(dir, kobev1.ClusterTemplate{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping test control plane: %v\n", err)
		}
	}()
	fx.env, fx.cs = env, cs
	return m.Run()
}

// startMember starts an API server (and its etcd) in dir with the
// admission configuration podsecurity renders for member cluster c; the
// caller must call stop.
func startMember(dir string, c kobev1.ClusterTemplate) (env *testenv.Env, cs *kubernetes.Clientset, stop func() error, err error) {
	policies := filepath.Join(dir, "admission-policies")
	config, manifests, err := podsecurity.Render(c, policies)
	if err == nil {
		err = os.Mkdir(policies, 0o700)
	}
	if err == nil && manifests != nil {
		err = os.WriteFile(filepath.Join(policies, podsecurity.PolicyFile), manifests, 0o600)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "admission.yaml"), config, 0o600)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	env, stop, err = testenv.NewWith(dir, testenv.Options{APIServerFlags: map[string]string{
		"admission-control-config-file": filepath.Join(dir, "admission.yaml"),
	}})
	if err != nil {
		return nil, nil, nil, err
	}
	if cs, err = kubernetes.NewForConfig(env.Config); err != nil {
		_ = stop()
		return nil, nil, nil, err
	}
	return env, cs, stop, nil
}

func createNamespace(t *testing.T, name string) *corev1.Namespace {
	t.Helper()
	ns, err := fx.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// assertRefused checks that err is the namespace policy's refusal.
func assertRefused(t *testing.T, err error, label string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), podsecurity.NamespacePolicy) || !strings.Contains(err.Error(), label) {
		t.Errorf("want a refusal by %s naming %s, got %v", podsecurity.NamespacePolicy, label, err)
	}
}

// TestNamespaceLevelCannotBeLowered tries, as system:masters, every write
// that changes a namespace's labels. The status and finalize subresources
// persist labels and PodSecurity does not check them.
func TestNamespaceLevelCannotBeLowered(t *testing.T) {
	privileged := map[string]string{enforce: "privileged"}
	labelPatch := func(labels map[string]string) []byte {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		return b
	}
	for _, tc := range []struct {
		name  string
		label string
		write func(ctx context.Context, ns *corev1.Namespace) error
	}{
		{"update", enforce, func(ctx context.Context, ns *corev1.Namespace) error {
			ns.Labels = privileged
			_, err := fx.cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
			return err
		}},
		{"merge patch", enforce, func(ctx context.Context, ns *corev1.Namespace) error {
			_, err := fx.cs.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, labelPatch(privileged), metav1.PatchOptions{})
			return err
		}},
		{"status merge patch", enforce, func(ctx context.Context, ns *corev1.Namespace) error {
			_, err := fx.cs.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, labelPatch(privileged), metav1.PatchOptions{}, "status")
			return err
		}},
		{"status update", enforce, func(ctx context.Context, ns *corev1.Namespace) error {
			ns.Labels = privileged
			_, err := fx.cs.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{})
			return err
		}},
		{"status enforce-version", enforceVersion, func(ctx context.Context, ns *corev1.Namespace) error {
			_, err := fx.cs.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, labelPatch(map[string]string{enforceVersion: "v1.0"}), metav1.PatchOptions{}, "status")
			return err
		}},
		{"finalize", enforce, func(ctx context.Context, ns *corev1.Namespace) error {
			ns.Labels = privileged
			_, err := fx.cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
			return err
		}},
		{"server-side apply", enforce, func(ctx context.Context, ns *corev1.Namespace) error {
			_, err := fx.cs.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(ns.Name).WithLabels(privileged), metav1.ApplyOptions{FieldManager: "holder", Force: true})
			return err
		}},
		{"server-side apply of status", enforce, func(ctx context.Context, ns *corev1.Namespace) error {
			_, err := fx.cs.CoreV1().Namespaces().ApplyStatus(ctx, corev1ac.Namespace(ns.Name).WithLabels(privileged), metav1.ApplyOptions{FieldManager: "holder", Force: true})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := createNamespace(t, "ns-"+strings.ReplaceAll(tc.name, " ", "-"))
			assertRefused(t, tc.write(t.Context(), ns), tc.label)
			got, err := fx.cs.CoreV1().Namespaces().Get(t.Context(), ns.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := got.Labels[tc.label]; ok {
				t.Errorf("the label was written: %s=%s", tc.label, v)
			}
		})
	}

	t.Run("create", func(t *testing.T) {
		_, err := fx.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns-create", Labels: privileged}}, metav1.CreateOptions{})
		assertRefused(t, err, enforce)
		_, err = fx.cs.CoreV1().Namespaces().Apply(t.Context(), corev1ac.Namespace("ns-apply-create").WithLabels(privileged), metav1.ApplyOptions{FieldManager: "holder"})
		assertRefused(t, err, enforce)
	})

	t.Run("stricter labels", func(t *testing.T) {
		ns := createNamespace(t, "ns-restricted")
		if _, err := fx.cs.CoreV1().Namespaces().Patch(t.Context(), ns.Name, types.MergePatchType,
			labelPatch(map[string]string{enforce: "restricted", enforceVersion: "latest"}), metav1.PatchOptions{}); err != nil {
			t.Errorf("a stricter level was refused: %v", err)
		}
	})
}

// lowerBehindTheAPI labels a namespace enforce=privileged by writing it to
// etcd directly: what a bypass of the namespace policy would leave.
// PodSecurity then lets every pod in; only the pod policy stands.
func lowerBehindTheAPI(t *testing.T, name string) {
	t.Helper()
	ns, err := fx.cs.CoreV1().Namespaces().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels[enforce] = "privileged"
	ns.ResourceVersion = "" // the API server keeps it out of storage
	scheme := clientgoscheme.Scheme
	codec := serializer.NewCodecFactory(scheme).EncoderForVersion(protobuf.NewSerializer(scheme, scheme), corev1.SchemeGroupVersion)
	var value bytes.Buffer
	if err := codec.Encode(ns, &value); err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte("/registry/namespaces/" + name)),
		"value": base64.StdEncoding.EncodeToString(value.Bytes()),
	})
	if err != nil {
		t.Fatal(err)
	}
	// etcd's gRPC gateway: no etcd client library needed for one put.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fx.env.EtcdURL+"/v3/kv/put", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd put: %s", resp.Status)
	}
	testenv.Eventually(t, 30*time.Second, "the API server sees the namespace at privileged", func() error {
		got, err := fx.cs.CoreV1().Namespaces().Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Labels[enforce] != "privileged" {
			return fmt.Errorf("labels %v", got.Labels)
		}
		return nil
	})
	// PodSecurity reads namespaces from its informer: wait until it lets a
	// privileged pod through to the policies after it.
	testenv.Eventually(t, 30*time.Second, "PodSecurity no longer refuses privileged pods", func() error {
		p := pod("probe")
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		_, err := fx.cs.CoreV1().Pods(name).Create(t.Context(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "violates PodSecurity") {
			return err
		}
		return nil
	})
}

func pod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "kobe.local/pause:v1",
		}}},
	}
}

func sc(p *corev1.Pod) *corev1.SecurityContext {
	c := &p.Spec.Containers[0]
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	return c.SecurityContext
}

func podSC(p *corev1.Pod) *corev1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

// assertPodRefused checks that err is the pod policy's refusal naming each
// of want.
func assertPodRefused(t *testing.T, err error, want ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), podsecurity.PodPolicy) {
		t.Fatalf("want a refusal by %s, got %v", podsecurity.PodPolicy, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal does not name %q: %v", w, err)
		}
	}
}

// TestPodsRefusedWhateverTheLabels creates, in a namespace labelled
// privileged, one pod per field that Pod Security baseline forbids.
func TestPodsRefusedWhateverTheLabels(t *testing.T) {
	const ns = "bypassed"
	createNamespace(t, ns)
	lowerBehindTheAPI(t, ns)

	for _, tc := range []struct {
		name   string
		mutate func(p *corev1.Pod)
		want   []string
	}{
		{"privileged", func(p *corev1.Pod) { sc(p).Privileged = ptr.To(true) }, []string{"securityContext.privileged", "container c"}},
		{"privileged init container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "kobe.local/pause:v1", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		}, []string{"securityContext.privileged", "container init"}},
		{"hostNetwork", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, []string{"spec.hostNetwork"}},
		{"hostPID", func(p *corev1.Pod) { p.Spec.HostPID = true }, []string{"spec.hostPID"}},
		{"hostIPC", func(p *corev1.Pod) { p.Spec.HostIPC = true }, []string{"spec.hostIPC"}},
		{"hostPath", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, []string{"hostPath", "volume root"}},
		{"hostPort", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}, []string{"hostPort", "container c"}},
		{"capabilities", func(p *corev1.Pod) {
			sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CHOWN", "SYS_ADMIN"}}
		}, []string{"capabilities.add", "container c adds SYS_ADMIN"}},
		{"procMount", func(p *corev1.Pod) {
			p.Spec.HostUsers = ptr.To(false) // what the API requires of an unmasked /proc
			sc(p).ProcMount = ptr.To(corev1.UnmaskedProcMount)
		}, []string{"procMount", "container c"}},
		{"seccomp of the pod", func(p *corev1.Pod) {
			podSC(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, []string{"seccompProfile.type", "spec.securityContext"}},
		{"seccomp of a container", func(p *corev1.Pod) {
			sc(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, []string{"seccompProfile.type", "container c"}},
		{"AppArmor of the pod", func(p *corev1.Pod) {
			podSC(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, []string{"AppArmor", "spec.securityContext"}},
		{"AppArmor of a container", func(p *corev1.Pod) {
			sc(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, []string{"AppArmor", "container c"}},
		{"AppArmor annotation", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
		}, []string{"AppArmor"}},
		{"sysctl", func(p *corev1.Pod) {
			podSC(p).Sysctls = []corev1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}, {Name: "kernel.msgmax", Value: "65536"}}
		}, []string{"sysctls", "kernel.msgmax"}},
		{"SELinux type", func(p *corev1.Pod) { sc(p).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} }, []string{"seLinuxOptions", "container c"}},
		{"SELinux user", func(p *corev1.Pod) { podSC(p).SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"} }, []string{"seLinuxOptions", "spec.securityContext"}},
		{"SELinux role", func(p *corev1.Pod) { sc(p).SELinuxOptions = &corev1.SELinuxOptions{Role: "system_r"} }, []string{"seLinuxOptions", "container c"}},
		{"Windows host process", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true // what the API requires of a host process
			podSC(p).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
		}, []string{"windowsOptions.hostProcess", "spec.securityContext"}},
		{"probe host", func(p *corev1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
		}, []string{"httpGet.host", "container c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("p-" + strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")))
			tc.mutate(p)
			_, err := fx.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
			assertPodRefused(t, err, tc.want...)
		})
	}

	t.Run("plain pod and ephemeral container", func(t *testing.T) {
		p, err := fx.cs.CoreV1().Pods(ns).Create(t.Context(), pod("plain"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a plain pod was refused: %v", err)
		}
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "kobe.local/pause:v1", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		}}}
		_, err = fx.cs.CoreV1().Pods(ns).UpdateEphemeralContainers(t.Context(), p.Name, p, metav1.UpdateOptions{})
		assertPodRefused(t, err, "securityContext.privileged", "container debug")
	})
}

func persistentVolume(name string, source corev1.PersistentVolumeSource) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: source,
		},
	}
}

func hostPathPV(name, path string, typ *corev1.HostPathType) *corev1.PersistentVolume {
	return persistentVolume(name, corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: typ}})
}

func refusedByVolumePolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), podsecurity.VolumePolicy)
}

// assertVolumeRefused checks that err is the volume policy's refusal naming
// each of want.
func assertVolumeRefused(t *testing.T, err error, want ...string) {
	t.Helper()
	if !refusedByVolumePolicy(err) {
		t.Fatalf("want a refusal by %s, got %v", podsecurity.VolumePolicy, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal does not name %q: %v", w, err)
		}
	}
}

// TestPersistentVolumesCannotNameTheNodesFiles creates, as system:masters,
// PersistentVolumes that a pod would mount through a claim (which neither
// PodSecurity nor the pod policy sees) to reach the node's files: every one
// is refused, and a volume of the node-local provisioner's shape is not.
func TestPersistentVolumesCannotNameTheNodesFiles(t *testing.T) {
	root := node.StorageRoot
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want []string
	}{
		{"hostPath /", hostPathPV("pv-slash", "/", nil), []string{"spec.hostPath.path"}},
		{"hostPath /etc", hostPathPV("pv-etc", "/etc", nil), []string{"spec.hostPath.path"}},
		{"hostPath of the storage root", hostPathPV("pv-root", root, ptr.To(corev1.HostPathDirectory)), []string{"spec.hostPath.path"}},
		{"hostPath of the storage root with a slash", hostPathPV("pv-root-slash", root+"/", nil), []string{"spec.hostPath.path"}},
		{"hostPath nested in the storage root", hostPathPV("pv-nested", root+"/a/b", nil), []string{"spec.hostPath.path"}},
		{"hostPath with a double slash", hostPathPV("pv-double-slash", "/"+root+"/pvc-x", nil), []string{"spec.hostPath.path"}},
		{"hostPath of type Socket", hostPathPV("pv-socket", root+"/pvc-socket", ptr.To(corev1.HostPathSocket)), []string{"spec.hostPath.type"}},
		{"hostPath of type File", hostPathPV("pv-file", root+"/pvc-file", ptr.To(corev1.HostPathFile)), []string{"spec.hostPath.type"}},
		{"hostPath of type CharDevice", hostPathPV("pv-chardev", root+"/pvc-chardev", ptr.To(corev1.HostPathCharDev)), []string{"spec.hostPath.type"}},
		{"local /", persistentVolume("pv-local", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/"}}), []string{"spec.local"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pv.Spec.Local != nil {
				// What the API requires of a local volume.
				tc.pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"n0"}}},
				}}}}
			}
			_, err := fx.cs.CoreV1().PersistentVolumes().Create(t.Context(), tc.pv, metav1.CreateOptions{})
			assertVolumeRefused(t, err, tc.want...)
		})
	}

	// The API server's own validation refuses ".." in a hostPath before
	// admission; the policy would refuse it too (TestVolumeDirPattern).
	t.Run("hostPath climbing out of the storage root", func(t *testing.T) {
		_, err := fx.cs.CoreV1().PersistentVolumes().Create(t.Context(), hostPathPV("pv-backsteps", root+"/../../etc", nil), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) && !refusedByVolumePolicy(err) {
			t.Errorf("a path with backsteps was not refused: %v", err)
		}
	})

	t.Run("server-side apply", func(t *testing.T) {
		pv := corev1ac.PersistentVolume("pv-apply").WithSpec(corev1ac.PersistentVolumeSpec().
			WithCapacity(corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}).
			WithAccessModes(corev1.ReadWriteOnce).
			WithHostPath(corev1ac.HostPathVolumeSource().WithPath("/")))
		_, err := fx.cs.CoreV1().PersistentVolumes().Apply(t.Context(), pv, metav1.ApplyOptions{FieldManager: "holder", Force: true})
		assertVolumeRefused(t, err, "spec.hostPath.path")
	})

	for _, tc := range []struct {
		name string
		typ  *corev1.HostPathType
	}{
		{"provisioned volume", ptr.To(corev1.HostPathDirectoryOrCreate)},
		{"provisioned volume without a type", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "pvc-0123abcd-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-")
			pv, err := fx.cs.CoreV1().PersistentVolumes().Create(t.Context(), hostPathPV(name, root+"/"+name, tc.typ), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("a volume under %s was refused: %v", root, err)
			}
			// The API server's own validation makes a volume's source
			// immutable and refuses this first (Invalid); the policy,
			// which matches updates too, would refuse it otherwise.
			patch := []byte(`{"spec":{"hostPath":{"path":"/"}}}`)
			_, err = fx.cs.CoreV1().PersistentVolumes().Patch(t.Context(), pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			if !apierrors.IsInvalid(err) && !refusedByVolumePolicy(err) {
				t.Errorf("moving the volume to / was not refused: %v", err)
			}
			got, err := fx.cs.CoreV1().PersistentVolumes().Get(t.Context(), pv.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p := got.Spec.HostPath.Path; p != root+"/"+name {
				t.Errorf("the volume's path is %s", p)
			}
		})
	}
}
