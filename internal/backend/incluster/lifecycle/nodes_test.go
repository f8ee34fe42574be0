//go:build root

package lifecycle_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	kubebackend "github.com/kunobi-ninja/kobe/internal/backend/kubernetes"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
)

const (
	nodeImage    = "kobe.local/kobe-node:v1"
	testappImage = "kobe.local/testapp:v1"
	// testappInNode is where the test's node image carries the workload's
	// archive (hack/image-node.sh, NODE_PRELOAD).
	testappInNode = "/usr/local/share/kobe-node/images/testapp.tar"
)

// buildNodeImage builds the workload image (images/testapp) and a node
// image that preloads it, with the code of this tree: kobe-node static, and
// hack/image-node.sh as make image-node runs it. KOBE_NODE_IMAGE_TAR names
// one built before (with testapp.tar preloaded) instead.
func buildNodeImage(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("KOBE_NODE_IMAGE_TAR"); p != "" {
		return p
	}
	root := testenv.RepoRoot()
	dir := t.TempDir()
	tool := envOr("HOSTCLUSTER_IMAGE_TOOL", filepath.Join(root, "bin", "tools", "kobe-image"))
	run := func(env []string, name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	static := []string{"CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}
	run(static, "go", "build", "-trimpath", "-o", filepath.Join(dir, "testapp"), "./images/testapp")
	run(static, "go", "build", "-trimpath", "-o", filepath.Join(dir, "kobe-node"), "./cmd/kobe-node")
	testapp := filepath.Join(dir, "testapp.tar")
	run(nil, tool, "build", "--out", testapp, "--name", testappImage, "--file", filepath.Join(dir, "testapp")+":/testapp",
		"--entrypoint", "/testapp", "--user", "65532:65532")
	out := filepath.Join(dir, "kobe-node.tar")
	run([]string{
		"OUT=" + out, "NAME=" + nodeImage, "KOBE_NODE=" + filepath.Join(dir, "kobe-node"), "NODE_DIR=" + hostcluster.NodeBinDir(),
		"PAUSE_TAR=" + envOr("HOSTCLUSTER_PAUSE_TAR", filepath.Join(root, "bin", "images", "pause.tar")),
		"COREDNS_TAR=" + filepath.Join(root, "bin", "images", "coredns.tar"),
		"IMAGE_TOOL=" + tool, "NODE_PRELOAD=" + testapp,
	}, filepath.Join(root, "hack", "image-node.sh"))
	return out
}

// TestNodePods: a member of the kubernetes
// backend with one node pod on the real-node host. The node registers
// Ready; a Deployment of an image preloaded through the node image reaches
// Available as containers nested in the node pod; kubectl logs and exec
// work with the member's admin kubeconfig; a pod reaches the member's API
// server through the in-member kubernetes Service; Pod Security (baseline)
// refuses a privileged pod; the lost node pod fails the member; Delete
// removes everything, and the machine is as before.
func TestNodePods(t *testing.T) {
	if err := hostcluster.Teardown(t.Context(), hostcluster.DefaultDir); err != nil {
		t.Fatalf("teardown before the test: %v", err)
	}
	before, err := hostcluster.TakeSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the host cluster's own cleanup (LIFO)
		after, err := hostcluster.TakeSnapshot(context.Background())
		if err != nil {
			t.Errorf("snapshot after: %v", err)
			return
		}
		if d := before.Diff(after); d != "" {
			t.Errorf("the machine changed:\n%s", d)
		}
	})
	began := time.Now()
	nodeTar := buildNodeImage(t)
	t.Logf("node image built in %v", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	e := start(t, nodeTar)
	t.Logf("host cluster up in %v", time.Since(began).Round(time.Millisecond))

	tmpl := kubebackend.Template{NodeImage: nodeImage, NodePreload: []string{testappInNode}}
	b := e.newBackend(t, tmpl, time.Minute)
	spec := &kobev1.KubernetesBackendSpec{
		Nodes:  ptr.To[int32](1),
		Images: &kobev1.KubernetesImages{PullPolicy: corev1.PullNever},
		Resources: &kobev1.KubernetesResources{Node: &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1536Mi")},
		}},
	}
	m := e.member(t, ns, "nodes", kobev1.AccessProxy, spec)
	nodeName := incluster.NodePodName(m, 0)

	began = time.Now()
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	var nodePodRunning time.Duration
	testenv.Eventually(t, 3*time.Minute, "node pod Running", func() error {
		var p corev1.Pod
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: nodeName}, &p); err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("node pod failed: %+v\n%s", p.Status, e.podLog(t, nodeName))
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("node pod %s", p.Status.Phase)
		}
		return nil
	})
	nodePodRunning = time.Since(began)
	obs := observeUntilOrLog(t, e, b, m, nodeName, 3*time.Minute)
	ready := time.Since(began)
	t.Logf("Create -> node pod Running %v, -> member Ready with node %s Ready %v",
		nodePodRunning.Round(time.Millisecond), nodeName, ready.Round(time.Millisecond))

	kc := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(kc, obs.Access.AdminKubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, error) {
		t.Helper()
		return testenv.Kubectl(t, kc, args...)
	}
	// execOut is what an exec printed on standard output: kubectl's
	// websocket warnings ("Unknown stream id") go to standard error and
	// must not be taken for the command's output.
	execOut := func(args ...string) (string, error) {
		t.Helper()
		return testenv.KubectlStdout(t, kc, append([]string{"exec", "deployment/testapp", "--"}, args...)...)
	}
	if out, err := kubectl("get", "node", nodeName, "-o", "jsonpath={.status.addresses[?(@.type=='InternalIP')].address}"); err != nil {
		t.Fatal(err)
	} else {
		var p corev1.Pod
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: nodeName}, &p); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != p.Status.PodIP {
			t.Errorf("node %s InternalIP %q, want the node pod's IP %s", nodeName, out, p.Status.PodIP)
		}
	}

	t.Run("a Deployment of a preloaded image runs nested in the node pod", func(t *testing.T) {
		deploy := filepath.Join(t.TempDir(), "testapp.yaml")
		if err := os.WriteFile(deploy, []byte(testappDeployment), 0o600); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if out, err := kubectl("apply", "-f", deploy); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if out, err := kubectl("wait", "--for=condition=Available", "--timeout=120s", "deployment/testapp"); err != nil {
			desc, _ := kubectl("describe", "pods", "-l", "app=testapp")
			t.Fatalf("%v\n%s\n%s\nnode pod log:\n%s", err, out, desc, e.podLog(t, nodeName))
		}
		t.Logf("Deployment applied -> Available %v", time.Since(began).Round(time.Millisecond))

		out, err := kubectl("logs", "deployment/testapp")
		if err != nil || !strings.Contains(out, "testapp: serving on :8080 as testapp-") {
			t.Errorf("kubectl logs: %v: %q", err, out)
		}
		// exec runs in the nested container: its hostname is the pod's.
		out, err = execOut("/testapp", "get", "http://127.0.0.1:8080/")
		if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "testapp-") {
			t.Errorf("kubectl exec: %v: %q", err, out)
		}
		// The member's API server through the in-member kubernetes
		// Service: the node's kube-proxy, the node pod's masquerading, the
		// host's Service.
		out, err = execOut("/testapp", "dial", incluster.MemberServiceIP+":443")
		if err != nil || !strings.Contains(out, "connected to") {
			t.Errorf("a pod dialling the kubernetes Service: %v: %q", err, out)
		}
		out, err = execOut("/testapp", "read", "/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil || strings.TrimSpace(out) != "default" {
			t.Errorf("the ServiceAccount token volume: %v: %q", err, out)
		}
		e.logRSS(t, nodeName)
	})

	t.Run("Pod Security baseline refuses a privileged pod", func(t *testing.T) {
		out, err := kubectl("run", "priv", "--image="+testappImage, "--image-pull-policy=Never", "--restart=Never",
			`--overrides={"apiVersion":"v1","spec":{"containers":[{"name":"priv","image":"`+testappImage+`","imagePullPolicy":"Never","securityContext":{"privileged":true}}]}}`)
		if err == nil || !strings.Contains(out, `violates PodSecurity "baseline:latest": privileged`) {
			t.Errorf("a privileged pod: %v: %s", err, out)
		}
		if out, err := kubectl("get", "pods", "priv"); err == nil {
			t.Errorf("the privileged pod exists: %s", out)
		}
		// The admin (system:masters, as a lease holder is) cannot lower the
		// level with namespace labels, nor see or remove the policy that
		// keeps it.
		const refusal = "this member enforces Pod Security baseline"
		out, err = kubectl("label", "namespace", "default", "pod-security.kubernetes.io/enforce=privileged")
		if err == nil || !strings.Contains(out, refusal) {
			t.Errorf("labelling default privileged: %v: %s", err, out)
		}
		ns := filepath.Join(t.TempDir(), "ns.yaml")
		if err := os.WriteFile(ns, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: old\n  labels:\n    pod-security.kubernetes.io/enforce: baseline\n    pod-security.kubernetes.io/enforce-version: v1.0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl("apply", "-f", ns); err == nil || !strings.Contains(out, "at version latest") {
			t.Errorf("a namespace pinned to an old version: %v: %s", err, out)
		}
		if out, err := kubectl("get", "validatingadmissionpolicies", "-o", "name"); err != nil || strings.Contains(out, kubebackend.PodSecurityPolicyName) {
			t.Errorf("the static policy is listed: %v: %s", err, out)
		}
	})

	t.Run("the node pod lost fails the member", func(t *testing.T) {
		if err := e.c.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: nodeName}}); err != nil {
			t.Fatal(err)
		}
		obs := observeUntil(t, b, m, backend.StateFailed, time.Minute)
		if !strings.Contains(obs.Message, nodeName) {
			t.Errorf("failed for %q, want the node pod named", obs.Message)
		}
		if err := b.Create(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		var p corev1.Pod
		if err := e.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: nodeName}, &p); err == nil && p.DeletionTimestamp == nil {
			t.Errorf("Create made the node pod again")
		}
	})

	t.Run("Delete removes the member", func(t *testing.T) {
		began := time.Now()
		testenv.Eventually(t, 2*time.Minute, "member gone", func() error {
			gone, err := b.Delete(t.Context(), m)
			if err != nil {
				return err
			}
			if !gone {
				return errStill
			}
			return nil
		})
		t.Logf("Delete -> gone %v", time.Since(began).Round(time.Millisecond))
		if left := e.objectsOf(t, ns, m.UID); len(left) > 0 {
			t.Errorf("left: %v", left)
		}
		if obs, err := b.Observe(t.Context(), m); err != nil || obs.State != backend.StateAbsent {
			t.Errorf("after Delete: %+v %v", obs, err)
		}
	})
}

var errStill = fmt.Errorf("not gone yet")

// testappDeployment runs the preloaded workload; baseline admits it.
const testappDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: testapp
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: testapp}
  template:
    metadata:
      labels: {app: testapp}
    spec:
      containers:
      - name: testapp
        image: ` + testappImage + `
        imagePullPolicy: Never
        ports: [{containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 1
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {memory: 64Mi}
`

// observeUntilOrLog waits for the member Ready; when it is not, the node
// pod's log says why.
func observeUntilOrLog(t *testing.T, e *env, b *incluster.Backend, m backend.Member, nodePod string, within time.Duration) backend.Observation {
	t.Helper()
	var obs backend.Observation
	err := testenv.Poll(t.Context(), within, func() error {
		var err error
		obs, err = b.Observe(t.Context(), m)
		if err != nil {
			return err
		}
		if obs.State == backend.StateFailed {
			return nil
		}
		if obs.State != backend.StateReady {
			return fmt.Errorf("state %s: %s", obs.State, obs.Message)
		}
		return nil
	})
	if err != nil || obs.State != backend.StateReady {
		t.Fatalf("member not Ready: %v %+v\nnode pod log:\n%s", err, obs, e.podLog(t, nodePod))
	}
	return obs
}

// podLog is a host pod's log, for failures.
func (e *env) podLog(t *testing.T, pod string) string {
	out, err := testenv.Kubectl(t, e.host.Kubeconfig, "-n", ns, "logs", pod, "--tail=60")
	if err != nil {
		return fmt.Sprintf("(no log: %v) %s", err, out)
	}
	return out
}

// logRSS logs the resident memory of the node pod's daemons, found in the
// machine's /proc by their command lines.
func (e *env) logRSS(t *testing.T, nodeName string) {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	rss := map[string]int{}
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		var what string
		switch {
		case strings.Contains(cmd, "kubelet") && strings.Contains(cmd, "--hostname-override="+nodeName):
			what = "kubelet"
		case strings.HasPrefix(cmd, "/usr/local/bin/containerd --config /var/lib/kobe-node/"):
			what = "containerd"
		case strings.HasPrefix(cmd, "/usr/local/bin/kube-proxy --config=/var/lib/kobe-node/"):
			what = "kube-proxy"
		case strings.HasPrefix(cmd, "/usr/local/bin/kobe-node --config /etc/kobe/node/"):
			what = "kobe-node"
		case strings.HasPrefix(cmd, "/usr/local/bin/containerd-shim-runc-v2"):
			what = "shims"
		default:
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(f), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				rss[what] += kb
			}
		}
	}
	if rss["kubelet"] == 0 || rss["containerd"] == 0 {
		t.Errorf("the node's kubelet and containerd are not among the machine's processes: %v", rss)
	}
	t.Logf("node pod RSS (MB): kubelet %d, containerd %d, kube-proxy %d, kobe-node %d, shims (host's and node's) %d",
		rss["kubelet"]/1024, rss["containerd"]/1024, rss["kube-proxy"]/1024, rss["kobe-node"]/1024, rss["shims"]/1024)
}
