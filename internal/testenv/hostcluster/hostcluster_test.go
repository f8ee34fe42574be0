//go:build root

package hostcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// envOr is the environment variable key, or def when it is unset.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// images returns the pause image's tarball and reference (make
// image-pause) and builds the echo workload image with the same tool
// (hack/image), from testdata/echo, into the test's directory.
func images(t *testing.T) (pauseTar, pauseRef, echoTar, echoRef string) {
	t.Helper()
	root := testenv.RepoRoot()
	pauseTar = envOr("HOSTCLUSTER_PAUSE_TAR", filepath.Join(root, "bin", "images", "pause.tar"))
	pauseRef = envOr("HOSTCLUSTER_PAUSE_IMAGE", "kobe.local/pause:v1")
	tool := envOr("HOSTCLUSTER_IMAGE_TOOL", filepath.Join(root, "bin", "tools", "kobe-image"))
	for _, f := range []string{pauseTar, tool} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run `make test-node` (it builds the pause image and kobe-image)", f)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "echo")
	build := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-o", bin, "./internal/testenv/hostcluster/testdata/echo")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the echo server: %v\n%s", err, out)
	}
	echoTar, echoRef = filepath.Join(dir, "echo.tar"), "kobe.local/echo:test"
	pack := exec.CommandContext(t.Context(), tool, "build", "--out", echoTar, "--name", echoRef,
		"--file", bin+":/echo", "--entrypoint", "/echo")
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("packing the echo image: %v\n%s", err, out)
	}
	return pauseTar, pauseRef, echoTar, echoRef
}

// TestHostCluster starts the host cluster, runs a pod of a locally built
// image behind a ClusterIP Service that answers from the host, tears the
// cluster down, and checks the machine is as it was: sysctls, mounts,
// links, routes, rules, cgroups, network namespaces and host paths.
func TestHostCluster(t *testing.T) {
	ctx := t.Context()
	pauseTar, pauseRef, echoTar, echoRef := images(t)

	// A crashed earlier run's leftovers are not part of "before".
	if err := Teardown(ctx, DefaultDir); err != nil {
		t.Fatalf("teardown before the test: %v", err)
	}
	before, err := TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	c, err := New(ctx, Options{PauseImage: pauseRef, Images: []string{pauseTar, echoTar}})
	if err != nil {
		t.Fatalf("starting host cluster: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	})
	t.Logf("host cluster up in %v (node %s, address %s)", time.Since(start).Round(time.Millisecond), c.NodeName, c.NodeIP)
	for _, tm := range c.Timings {
		t.Logf("  %-24s %v", tm.Step, tm.Duration.Round(time.Millisecond))
	}

	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := node.Status.NodeInfo.KubeletVersion, "v"+testenv.KubernetesVersion; got != want {
		t.Errorf("kubelet reports version %q, want %q (hack/build-node.sh stamps it)", got, want)
	}

	// Another run's teardown waits for this cluster instead of destroying it.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = Teardown(short, DefaultDir)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "holds") {
		t.Fatalf("Teardown while the cluster runs: %v, want it to wait for the lock", err)
	}

	t.Run("a pod behind a ClusterIP Service answers from the host and reaches the API server", func(t *testing.T) {
		podAndService(t, c, echoRef)
	})

	during, err := TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if during.Diff(before) == "" {
		t.Fatal("the running host cluster changed nothing the snapshot sees: the snapshot cannot tell a clean machine from a dirty one")
	}

	stopStart := time.Now()
	stopped = true
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	t.Logf("teardown in %v", time.Since(stopStart).Round(time.Millisecond))
	after, err := TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Errorf("the machine differs after teardown (- before only, + after only):\n%s", d)
	}
	// Idempotent: a second teardown finds nothing to do and changes nothing.
	if err := Teardown(ctx, DefaultDir); err != nil {
		t.Errorf("second teardown: %v", err)
	}
	again, err := TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(again); d != "" {
		t.Errorf("the machine differs after a second teardown:\n%s", d)
	}
}

func podAndService(t *testing.T, c *Cluster, image string) {
	ctx := t.Context()
	pods := c.Client.CoreV1().Pods("default")
	labels := map[string]string{"app": "echo"}
	created := time.Now()
	_, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "echo", Image: image, ImagePullPolicy: corev1.PullNever,
				Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	testenv.Eventually(t, 2*time.Minute, "pod echo Ready", func() error {
		pod, err = pods.Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("pod not Ready: phase %s, %v", pod.Status.Phase, pod.Status.ContainerStatuses)
	})
	t.Logf("pod create -> Ready in %v", time.Since(created).Round(time.Millisecond))
	_, podNet, _ := net.ParseCIDR(NodePodCIDR)
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !podNet.Contains(ip) {
		t.Errorf("pod IP %q is not in the node's pod range %s", pod.Status.PodIP, NodePodCIDR)
	}

	// The API server reaches kubelet (logs) through the node's InternalIP.
	logs, err := pods.GetLogs("echo", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "serving on :8080") {
		t.Errorf("pod logs through the API server: %q, %v", logs, err)
	}

	svc, err := c.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, svcNet, _ := net.ParseCIDR(ServiceCIDR)
	if ip := net.ParseIP(svc.Spec.ClusterIP); ip == nil || !svcNet.Contains(ip) {
		t.Fatalf("ClusterIP %q is not in %s", svc.Spec.ClusterIP, ServiceCIDR)
	}
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/"
	answered := time.Now()
	testenv.Eventually(t, time.Minute, "the Service to answer from the host", func() error {
		body, err := get(ctx, url)
		if err != nil {
			return err
		}
		if strings.TrimSpace(body) != "echo" {
			return fmt.Errorf("%s answered %q, want the pod's name", url, body)
		}
		return nil
	})
	t.Logf("Service created -> answers from the host in %v", time.Since(answered).Round(time.Millisecond))

	// From inside the pod's network namespace, the kubernetes Service
	// reaches the API server on the machine's advertised address.
	pid := podPID(t, string(pod.UID))
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed to call the API server from the pod's network namespace")
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net=/proc/"+pid+"/ns/net", curl, "-sk", "--max-time", "10",
		"https://"+kubernetesSvIP+"/version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"gitVersion"`) {
		t.Errorf("GET https://%s/version from the pod's network namespace: %v: %s", kubernetesSvIP, err, out)
	}

	// The egress guard is in place while pods run.
	if _, err := run(ctx, "iptables", "-w", "-C", "FORWARD", "-s", "198.18.0.0/15", "-j", EgressChain); err != nil {
		t.Errorf("egress guard missing: %v", err)
	}
}

// podPID is a process of the pod with uid, from the pod's cgroup.
func podPID(t *testing.T, uid string) string {
	t.Helper()
	for _, root := range cgroupRoots() {
		var pid string
		_ = filepath.WalkDir(filepath.Join(root, "kubepods"), func(path string, e os.DirEntry, err error) error {
			if err != nil || pid != "" || !e.IsDir() || !strings.Contains(path, "pod"+uid) {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if f := strings.Fields(string(b)); len(f) > 0 {
				pid = f[0]
			}
			return nil
		})
		if pid != "" {
			return pid
		}
	}
	t.Fatalf("no process of pod %s in any kubepods cgroup", uid)
	return ""
}

func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
