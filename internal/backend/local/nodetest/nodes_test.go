//go:build root

package nodetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
)

const readyDeadline = 3 * time.Minute

// agent is the kobe-node binary built once for the package.
var agent string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kobe-nodetest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agent = filepath.Join(dir, "kobe-node")
	cmd := exec.Command("go", "build", "-o", agent, "./cmd/kobe-node")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building kobe-node: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// newBackend returns a local backend for members with nodes, failing the
// test when this machine cannot run them (not root, binaries missing),
// and saves the sysctls kubelet may change, restoring them at the end.
func newBackend(t *testing.T) *local.Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("members with nodes need root: run this test as root")
	}
	for _, f := range []string{
		filepath.Join(testenv.BinDir(), "kube-apiserver"), filepath.Join(testenv.BinDir(), "kube-scheduler"),
		filepath.Join(hostcluster.NodeBinDir(), "kubelet"), filepath.Join(hostcluster.NodeBinDir(), "kube-proxy"),
		filepath.Join(testenv.RepoRoot(), "bin", "images", local.PauseArchive),
		filepath.Join(testenv.RepoRoot(), "bin", "images", "coredns.tar"), "/usr/bin/containerd",
	} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run `make controlplane node image-pause image-coredns node-deps` first", f)
		}
	}
	restore, err := SaveSysctls()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("restoring sysctls: %v", err)
		}
	})
	return reopen(t, t.TempDir())
}

// reopen returns a backend for members with nodes over dataRoot (a second
// one poses as the operator after a restart), swept when the test ends.
func reopen(t *testing.T, dataRoot string) *local.Backend {
	t.Helper()
	b, err := local.New(local.Options{
		BinDir:     testenv.BinDir(),
		DataRoot:   dataRoot,
		Logger:     testr.NewWithInterface(t, testr.Options{}),
		NodeBinDir: hostcluster.NodeBinDir(),
		NodeAgent:  agent,
		ImageDir:   filepath.Join(testenv.RepoRoot(), "bin", "images"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := b.Sweep(ctx, func(string, types.UID) bool { return false }); err != nil {
			t.Errorf("sweeping: %v", err)
		}
	})
	return b
}

func nodeMember(name string, nodes int32) backend.Member {
	return backend.Member{
		Namespace: "pool-ns", Name: name, UID: uuid.NewUUID(), Pool: "p",
		Spec: kobev1.ClusterInstanceSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal, Local: &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](nodes)}}},
	}
}

// waitReady observes m until Ready and returns the observation.
func waitReady(t *testing.T, b *local.Backend, m backend.Member) backend.Observation {
	t.Helper()
	deadline := time.Now().Add(readyDeadline)
	var obs backend.Observation
	for time.Now().Before(deadline) {
		var err error
		obs, err = b.Observe(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		switch obs.State {
		case backend.StateReady:
			return obs
		case backend.StateFailed:
			t.Fatalf("member failed: %s%s", obs.Message, nodeLogs(b, m))
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("member not Ready within %s: %s%s", readyDeadline, obs.Message, nodeLogs(b, m))
	return obs
}

// nodeLogs is the tail of the node logs, for failure messages.
func nodeLogs(b *local.Backend, m backend.Member) string {
	files, _ := filepath.Glob(filepath.Join(b.MemberDir(m), "logs", "kobe-node-*.log"))
	more, _ := filepath.Glob(filepath.Join(b.MemberDir(m), "nodes", "*", "logs", "*.log"))
	var sb strings.Builder
	for _, f := range append(files, more...) {
		data, _ := os.ReadFile(f)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&sb, "\n--- %s:\n%s", f, data)
	}
	return sb.String()
}

func clientFor(t *testing.T, obs backend.Observation) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(obs.Access.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func pausePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: local.DefaultPauseImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
}

// TestMemberWithOneNode creates a member with one real node, runs a pod on
// it, sees Pod Security refuse privileged and hostPath pods, deletes the
// member and checks nothing of it is left on the host.
func TestMemberWithOneNode(t *testing.T) {
	b := newBackend(t)
	m := nodeMember("one", 1)
	ctx := t.Context()
	start := time.Now()
	if err := b.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	slot, ok, err := b.NodeSlot(m)
	if err != nil || !ok {
		t.Fatalf("no slot recorded: %v", err)
	}
	obs := waitReady(t, b, m)
	t.Logf("member with 1 node: Create -> Ready in %s (slot %d, endpoint %s)", time.Since(start).Round(time.Millisecond), slot, obs.Access.Endpoint)
	cs := clientFor(t, obs)

	podStart := time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pausePod("p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	if err := testenv.Poll(ctx, 2*time.Minute, func() error {
		pod, err = cs.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod phase %s", pod.Status.Phase)
		}
		return nil
	}); err != nil {
		t.Fatalf("pod not Running: %v%s", err, nodeLogs(b, m))
	}
	if pod.Spec.NodeName != local.NodeName(0) {
		t.Errorf("pod runs on %q, want %s", pod.Spec.NodeName, local.NodeName(0))
	}
	t.Logf("pod Running in %s on %s with IP %s", time.Since(podStart).Round(time.Millisecond), pod.Spec.NodeName, pod.Status.PodIP)
	checkLevelHeld(t, cs)
	logRSS(t, local.NodeCgroup(string(m.UID)))
	logIdleCPU(t, local.NodeCgroup(string(m.UID)))
	checkHidden(t, b, m)

	// Pod Security baseline (the default) refuses what would own the host.
	yes := true
	privileged := pausePod("privileged")
	privileged.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
	hostPath := pausePod("hostpath")
	hostPath.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	hostPath.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}
	hostNet := pausePod("hostnet")
	hostNet.Spec.HostNetwork = true
	for _, p := range []*corev1.Pod{privileged, hostPath, hostNet} {
		_, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
			t.Errorf("pod %s: want a Forbidden error from PodSecurity, got %v", p.Name, err)
		}
	}

	// An operator restart adopts the node: a new backend over the same
	// data root sees the member Ready and destroys it whole.
	b.Close()
	b = reopen(t, filepath.Dir(b.MemberDir(m)))
	if obs, err := b.Observe(ctx, m); err != nil || obs.State != backend.StateReady {
		t.Fatalf("after a restart: Observe = %v (%s), %v; want Ready", obs.State, obs.Message, err)
	}
	deleteAndCheck(t, b, m, slot)
}

// TestFailedNodeIsSweptWhole kills a node's kubelet: kobe-node stops the
// node and exits, the member is Failed and names the cause, and a sweep
// (the operator's start-up clean-up of members nobody owns) leaves nothing.
func TestFailedNodeIsSweptWhole(t *testing.T) {
	b := newBackend(t)
	m := nodeMember("failing", 1)
	ctx := t.Context()
	if err := b.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	slot, _, err := b.NodeSlot(m)
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, b, m)
	kubelet := -1
	for _, pid := range cgroupPids(t, local.NodeCgroup(string(m.UID))+"/n0") {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "kubelet" {
			kubelet = pid
		}
	}
	if kubelet < 0 {
		t.Fatal("no kubelet in the node's cgroup")
	}
	if err := syscall.Kill(kubelet, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var obs backend.Observation
	if err := testenv.Poll(ctx, time.Minute, func() error {
		obs, err = b.Observe(ctx, m)
		if err != nil {
			return err
		}
		if obs.State != backend.StateFailed {
			return fmt.Errorf("member is %s: %s", obs.State, obs.Message)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(obs.Message, "kobe-node-0") || !strings.Contains(lastLog(b, m), "kubelet exited") {
		t.Errorf("failure does not name the node and its cause: %q; node log: %s", obs.Message, lastLog(b, m))
	}
	dir := b.MemberDir(m)
	removed, err := b.Sweep(ctx, func(string, types.UID) bool { return false })
	if err != nil || len(removed) != 1 {
		t.Fatalf("Sweep = %v, %v; want the member removed", removed, err)
	}
	if leaks := MemberLeaks(dir, string(m.UID), slot); len(leaks) > 0 {
		t.Errorf("left after Sweep:\n%s", strings.Join(leaks, "\n"))
	}
}

// checkLevelHeld checks that the admin (system:masters, like a lease
// holder) cannot lower Pod Security with namespace labels, and that no
// admission policy of the API can be removed to allow it.
func checkLevelHeld(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	ctx := t.Context()
	const enforce = "pod-security.kubernetes.io/enforce"
	for name, labels := range map[string]map[string]string{
		"weaker": {enforce: "privileged"},
		"old":    {enforce: "baseline", "pod-security.kubernetes.io/enforce-version": "v1.0"},
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns-" + name, Labels: labels}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "this member enforces Pod Security baseline") {
			t.Errorf("namespace labelled %v: want the member's refusal, got %v", labels, err)
		}
	}
	def, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	def.Labels[enforce] = "privileged"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, def, metav1.UpdateOptions{}); err == nil {
		t.Error("labelling namespace default enforce=privileged was allowed")
	}
	stricter := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns-stricter", Labels: map[string]string{enforce: "restricted"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, stricter, metav1.CreateOptions{}); err != nil {
		t.Errorf("a stricter namespace was refused: %v", err)
	}
	if err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, "kobe-pod-security.static.k8s.io", metav1.DeleteOptions{}); err == nil {
		t.Error("the static Pod Security policy could be deleted through the API")
	}
}

// checkHidden checks, through kubelet's view of the file system, that the
// node sees its own directory and nothing else of the data root: not the
// member's keys, not another member's directory.
func checkHidden(t *testing.T, b *local.Backend, m backend.Member) {
	t.Helper()
	kubelet := -1
	for _, pid := range cgroupPids(t, local.NodeCgroup(string(m.UID))+"/n0") {
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "kubelet" {
			kubelet = pid
		}
	}
	if kubelet < 0 {
		t.Fatal("no kubelet in the node's cgroup")
	}
	root := "/proc/" + strconv.Itoa(kubelet) + "/root"
	dir := b.MemberDir(m)
	// A neighbour's directory, made after the node started: the node's
	// tmpfs must not show it.
	other := filepath.Join(filepath.Dir(dir), "neighbour_x_0000")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(other) }()
	for _, hidden := range []string{filepath.Join(dir, "pki", "client-ca.key"), filepath.Join(dir, "state.json"), other} {
		if _, err := os.Stat(root + hidden); err == nil {
			t.Errorf("the node sees %s", hidden)
		}
	}
	if _, err := os.Stat(root + filepath.Join(dir, "nodes", "0", "node.json")); err != nil {
		t.Errorf("the node does not see its own directory: %v", err)
	}
	entries, err := os.ReadDir(root + filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(dir) {
		t.Errorf("the node sees %v in the data root, want only its member's directory", entries)
	}
}

func lastLog(b *local.Backend, m backend.Member) string {
	data, _ := os.ReadFile(filepath.Join(b.MemberDir(m), "logs", "kobe-node-0.log"))
	return string(data)
}

func cgroupPids(t *testing.T, cgroup string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", cgroup, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// deleteAndCheck deletes m and checks nothing of it is left.
func deleteAndCheck(t *testing.T, b *local.Backend, m backend.Member, slot int) {
	t.Helper()
	dir := b.MemberDir(m)
	start := time.Now()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done, err := b.Delete(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Delete did not finish within 2 minutes")
		}
	}
	t.Logf("Delete took %s", time.Since(start).Round(time.Millisecond))
	if leaks := MemberLeaks(dir, string(m.UID), slot); len(leaks) > 0 {
		t.Errorf("left after Delete:\n%s", strings.Join(leaks, "\n"))
	}
	if mounts := MountsUnder(filepath.Dir(dir)); len(mounts) > 0 {
		t.Errorf("mounts under the data root: %v", mounts)
	}
	obs, err := b.Observe(t.Context(), m)
	if err != nil || obs.State != backend.StateAbsent {
		t.Errorf("Observe after Delete = %v, %v; want Absent", obs.State, err)
	}
}

// logIdleCPU logs the CPU the node (with its one pod) uses over 10 idle
// seconds, from its cgroup's cpuacct.usage.
func logIdleCPU(t *testing.T, cgroup string) {
	t.Helper()
	usage := func() int64 {
		data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", cgroup, "cpuacct.usage"))
		if err != nil {
			t.Fatalf("reading the node's CPU usage: %v", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const window = 10 * time.Second
	before := usage()
	time.Sleep(window)
	used := time.Duration(usage() - before)
	t.Logf("idle CPU of the node over %s: %s (%.1f%% of one core)", window, used.Round(time.Millisecond), 100*used.Seconds()/window.Seconds())
}

// logRSS logs the resident memory of the node's processes by program.
func logRSS(t *testing.T, cgroup string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", cgroup, "n0", "cgroup.procs"))
	if err != nil {
		t.Logf("reading the node's processes: %v", err)
		return
	}
	rss := map[string]int{}
	for f := range strings.FieldsSeq(string(data)) {
		status, err := os.ReadFile("/proc/" + f + "/status")
		if err != nil {
			continue
		}
		var name string
		var kb int
		for line := range strings.SplitSeq(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			}
		}
		rss[name] += kb
	}
	var parts []string
	for name, kb := range rss {
		parts = append(parts, fmt.Sprintf("%s %.1f MiB", name, float64(kb)/1024))
	}
	t.Logf("RSS of the node's processes (directly in its cgroup): %s", strings.Join(parts, ", "))
}

// testappImage is images/testapp (make image-testapp), preloaded through
// spec.backend.local.preloadImages.
const testappImage = "kobe.local/testapp:v1"

// TestMemberWithTwoNodes creates a member with two nodes and the testapp
// image preloaded, and checks the member's network from a pod on node 0:
// a pod on node 1 by its IP, a Service whose endpoint is on the same node,
// one whose endpoint is on the other node, and the API server through the
// "kubernetes" Service. Then it deletes the member and checks nothing is
// left.
func TestMemberWithTwoNodes(t *testing.T) {
	if _, err := os.Stat(filepath.Join(testenv.RepoRoot(), "bin", "images", "testapp.tar")); err != nil {
		t.Fatal("bin/images/testapp.tar is missing: run `make image-testapp` first")
	}
	b := newBackend(t)
	m := nodeMember("two", 2)
	m.Spec.Backend.Local.PreloadImages = []string{"testapp.tar"}
	ctx := t.Context()
	start := time.Now()
	if err := b.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	slot, ok, err := b.NodeSlot(m)
	if err != nil || !ok {
		t.Fatalf("no slot recorded: %v", err)
	}
	obs := waitReady(t, b, m)
	t.Logf("member with 2 nodes: Create -> Ready in %s (slot %d)", time.Since(start).Round(time.Millisecond), slot)
	cs := clientFor(t, obs)

	servers := make([]*corev1.Pod, 2)
	services := make([]*corev1.Service, 2)
	for i := range 2 {
		name := "srv-" + strconv.Itoa(i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{
				NodeName:   local.NodeName(i),
				Containers: []corev1.Container{{Name: "app", Image: testappImage, ImagePullPolicy: corev1.PullNever}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": name},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if services[i], err = cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := testenv.Poll(ctx, 2*time.Minute, func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "srv-"+strconv.Itoa(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					servers[i] = p
					return nil
				}
			}
			return fmt.Errorf("pod %s not Ready (phase %s)", p.Name, p.Status.Phase)
		}); err != nil {
			t.Fatalf("%v%s", err, nodeLogs(b, m))
		}
	}
	kube, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"pod-ip-other-node", []string{"get", "http://" + servers[1].Status.PodIP + ":8080/"}, "srv-1"},
		{"service-same-node", []string{"get", "http://" + services[0].Spec.ClusterIP + "/"}, "srv-0"},
		{"service-other-node", []string{"get", "http://" + services[1].Spec.ClusterIP + "/"}, "srv-1"},
		{"api-server", []string{"dial", kube.Spec.ClusterIP + ":443"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runOnce(t, cs, "client-"+tc.name, local.NodeName(0), tc.args)
			if err != nil {
				t.Fatalf("testapp %s from node-0: %v: %s", strings.Join(tc.args, " "), err, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("testapp %s answered %q, want %q", strings.Join(tc.args, " "), out, tc.want)
			}
		})
	}
	deleteAndCheck(t, b, m, slot)
}

// runOnce runs testapp with args in a pod on nodeName until it ends, and
// returns its log; err is set when it failed.
func runOnce(t *testing.T, cs *kubernetes.Clientset, name, nodeName string, args []string) (string, error) {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:      nodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "app", Image: testappImage, ImagePullPolicy: corev1.PullNever, Args: args}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	if err := testenv.Poll(ctx, time.Minute, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase = p.Status.Phase
		if phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("pod %s is %s", name, phase)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	logs, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	if phase == corev1.PodFailed {
		return string(logs), fmt.Errorf("pod %s failed", name)
	}
	return string(logs), nil
}
