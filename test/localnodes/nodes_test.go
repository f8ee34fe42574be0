//go:build root

package localnodes

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/kobesuite"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
	"github.com/kunobi-ninja/kobe/test/hostile"
	"github.com/kunobi-ninja/kobe/test/outside"
)

// workload is what one leased member runs: the testapp Deployment behind
// a ClusterIP Service, and a client pod to exec into.
type workload struct {
	pool       string
	lease      wire.Lease
	kubeconfig string
	member     *kobev1.ClusterInstance
	// podName and podIP are the Deployment's pod; clusterIP the Service's.
	podName, podIP, clusterIP string
}

const manifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: testapp
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
---
apiVersion: v1
kind: Service
metadata:
  name: testapp
spec:
  type: ClusterIP
  selector: {app: testapp}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata:
  name: testapp-headless
spec:
  clusterIP: None
  selector: {app: testapp}
  ports: [{port: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  containers:
  - name: client
    image: ` + testappImage + `
    imagePullPolicy: Never
`

// TestLeasedMembersRunPods is the must-show list, in order: the
// two members' workloads (Direct and Proxy) stay up for the isolation and
// Pod Security checks, then release must leave nothing.
func TestLeasedMembersRunPods(t *testing.T) {
	var direct, proxied *workload
	t.Run("Direct: a Deployment of a preloaded image, logs, exec, port-forward, ClusterIP", func(t *testing.T) {
		direct = runWorkload(t, directPool)
	})
	t.Run("Proxy: the same through the connect proxy", func(t *testing.T) {
		proxied = runWorkload(t, proxyPool)
		if !strings.Contains(proxied.lease.Kubeconfig, "/connect/"+proxied.lease.ID) {
			t.Errorf("the Proxy lease's kubeconfig does not point at the connect proxy:\n%s", serverLine(proxied.lease.Kubeconfig))
		}
		if strings.Contains(direct.lease.Kubeconfig, "/connect/") {
			t.Errorf("the Direct lease's kubeconfig points at the connect proxy:\n%s", serverLine(direct.lease.Kubeconfig))
		}
		// The pool's registry mirror is in the running node's containerd
		// configuration (the pods above ran: containerd took it).
		cfg, err := os.ReadFile(filepath.Join(memberDir(t, proxied.member), "nodes", "0", "containerd", "config.toml"))
		if want := `registry.mirrors."docker.io"]` + "\n" + `    endpoint = ["` + mirrorURL + `"]`; err != nil || !strings.Contains(string(cfg), want) {
			t.Errorf("the node's containerd configuration lacks the pool's mirror %q (%v):\n%s", want, err, cfg)
		}
	})
	if direct == nil || proxied == nil {
		t.Fatal("both workloads are needed for the rest")
	}
	t.Run("two members cannot reach each other's pods", func(t *testing.T) {
		isolated(t, direct, proxied)
		isolated(t, proxied, direct)
	})
	t.Run("Pod Security keeps a lease holder off the host", func(t *testing.T) {
		podSecurity(t, direct, proxied)
	})
	t.Run("network volumes are refused", func(t *testing.T) {
		hostile.NetworkVolumesRefused(t, hostile.Target{Kubeconfig: direct.kubeconfig, Image: testappImage})
	})
	t.Run("a claim of the default StorageClass binds, keeps its data for the next pod, and goes with the claim", func(t *testing.T) {
		storage(t, direct)
	})
	out := outside.Start(t, filepath.Join(imageDir, "rootfs", "testapp"))
	defer out.Stop()
	t.Run("a hostile holder of a member without egress gets nothing beyond it", func(t *testing.T) {
		hostileHolder(t, direct, out, false)
	})
	t.Run("a hostile holder of a member with public egress gets only public addresses", func(t *testing.T) {
		hostileHolder(t, proxied, out, true)
	})
	t.Run("a pod pulls an image by tag over its pool's egress, and not without it", func(t *testing.T) {
		pullsOverEgress(t, proxied, direct, out)
	})
	t.Run("kobe load puts an image into its lease's member and no other", func(t *testing.T) {
		loadsIntoItsMember(t, direct, proxied)
	})
	t.Run("admission webhooks reach the member's pods and nothing else", func(t *testing.T) {
		webhooks(t, direct, out)
	})
	t.Run("a holder at their member's limits leaves the neighbour and the machine alone", func(t *testing.T) {
		noisyNeighbour(t, direct, proxied)
	})
	t.Run("a holder's objects without end stop their own API server only", func(t *testing.T) {
		// It costs the holder their member: a member of its own.
		kubeconfig, release := lease(t, directPool)
		defer release(t)
		hostile.APIServerAppetite(t, hostile.Target{Kubeconfig: kubeconfig},
			hostile.Target{Kubeconfig: proxied.kubeconfig, Image: testappImage, RunningPod: "client"}, int(memoryBytes(directMemory)>>20), nil)
	})
	t.Run("after release nothing of the members is left", func(t *testing.T) {
		releaseLeavesNothing(t, direct, proxied)
	})
}

func runWorkload(t *testing.T, pool string) *workload {
	w := &workload{pool: pool}
	began := time.Now()
	testenv.Eventually(t, memberDeadline, "pool "+pool+" to have a Ready member", func() error {
		p := &kobev1.ClusterPool{}
		if err := s.Env.Client.Get(t.Context(), types.NamespacedName{Namespace: kobesuite.Namespace, Name: pool}, p); err != nil {
			return err
		}
		if p.Status.Ready < 1 {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
	t.Logf("pool %s Ready after %v", pool, time.Since(began).Round(time.Millisecond))
	// The pool leaves nodes unset: its members have the operator's default
	// node, and the pool says so.
	p := &kobev1.ClusterPool{}
	if err := s.Env.Client.Get(t.Context(), types.NamespacedName{Namespace: kobesuite.Namespace, Name: pool}, p); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionNodes); c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != kobev1.ReasonNodesRun || !strings.Contains(c.Message, "unset, this operator's default") {
		t.Errorf("pool %s's Nodes condition: %+v, want True NodesRun from the default", pool, c)
	}

	// The kubeconfig outlives this subtest: the next ones use it.
	w.kubeconfig = filepath.Join(s.Work, pool+".kubeconfig")
	leased := time.Now()
	out, errOut, err := s.Kobe(t, time.Minute, "lease", pool, "--ttl", "30m", "--kubeconfig", w.kubeconfig, "-o", "json")
	if err != nil {
		t.Fatalf("kobe lease %s: %v\n%s%s", pool, err, out, errOut)
	}
	t.Logf("kobe lease %s returned in %v", pool, time.Since(leased).Round(time.Millisecond))
	if err := json.Unmarshal([]byte(out), &w.lease); err != nil {
		t.Fatalf("decoding kobe lease -o json %q: %v", out, err)
	}
	if w.lease.Kubeconfig == "" {
		b, err := os.ReadFile(w.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		w.lease.Kubeconfig = string(b)
	}
	w.member = memberOf(t, w.lease.ID)

	// The node is there and Ready the moment the lease is handed out.
	nodes := testenv.MustKubectl(t, w.kubeconfig, "get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}")
	if lines := strings.Split(nodes, "\n"); len(lines) != 1 || !strings.HasSuffix(lines[0], " True") {
		t.Fatalf("the leased member's nodes are not one Ready node:\n%s", nodes)
	}
	// The readiness probe pods were deleted before hand-out: the cluster
	// DNS is all that runs.
	pods := testenv.MustKubectl(t, w.kubeconfig, "get", "pods", "-A", "-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.status.phase}{\"\\n\"}{end}")
	if lines := strings.Split(pods, "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "kube-system/coredns-") || !strings.HasSuffix(lines[0], " Running") {
		t.Errorf("the leased member runs other pods than its cluster DNS:\n%s", pods)
	}

	applyStarted := time.Now()
	if out, err := testenv.Kubectl(t, w.kubeconfig, "apply", "-f", writeFile(t, manifest)); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	if out, err := testenv.Kubectl(t, w.kubeconfig, "wait", "--for=condition=Available", "deployment/testapp", "--timeout=25s"); err != nil {
		t.Fatalf("the Deployment did not become Available: %v\n%s\n%s", err, out, describe(t, w))
	}
	if out, err := testenv.Kubectl(t, w.kubeconfig, "wait", "--for=condition=Ready", "pod/client", "--timeout=25s"); err != nil {
		t.Fatalf("the client pod did not become Ready: %v\n%s\n%s", err, out, describe(t, w))
	}
	t.Logf("Deployment Available %v after kubectl apply", time.Since(applyStarted).Round(time.Millisecond))

	w.podName = testenv.MustKubectl(t, w.kubeconfig, "get", "pods", "-l", "app=testapp", "-o", "jsonpath={.items[0].metadata.name}")
	w.podIP = testenv.MustKubectl(t, w.kubeconfig, "get", "pods", "-l", "app=testapp", "-o", "jsonpath={.items[0].status.podIP}")
	w.clusterIP = testenv.MustKubectl(t, w.kubeconfig, "get", "service", "testapp", "-o", "jsonpath={.spec.clusterIP}")
	for what, ip := range map[string]string{"pod IP": w.podIP, "ClusterIP": w.clusterIP} {
		a, err := netip.ParseAddr(ip)
		if inRegions := err == nil && (node.PodRegion.Contains(a) || node.ServiceRegion.Contains(a)); !inRegions {
			t.Errorf("%s %q is outside the local members' ranges (%s, %s)", what, ip, node.PodRegion, node.ServiceRegion)
		}
	}

	if logs := testenv.MustKubectl(t, w.kubeconfig, "logs", "deployment/testapp"); !strings.Contains(logs, "serving on :8080 as "+w.podName) {
		t.Errorf("kubectl logs: %q", logs)
	}
	// exec, and the Service from another pod of the member.
	if got, err := execIn(t, w, "get", "http://"+w.clusterIP+"/"); err != nil || got != w.podName {
		t.Errorf("GET the ClusterIP from the client pod = %q (%v), want the Deployment's pod %q", got, err, w.podName)
	}
	if got, err := execIn(t, w, "get", "http://"+w.podIP+":8080/"); err != nil || got != w.podName {
		t.Errorf("GET the pod IP from the client pod = %q (%v), want %q", got, err, w.podName)
	}
	// The cluster DNS: a Service by its short and full names, a headless
	// Service (its name is the pod's address).
	for _, url := range []string{"http://testapp/", "http://testapp.default.svc.cluster.local/", "http://testapp-headless:8080/"} {
		if got, err := execIn(t, w, "get", url); err != nil || got != w.podName {
			t.Errorf("GET %s from the client pod = %q (%v), want %q", url, got, err, w.podName)
		}
	}
	if got := portForward(t, w); got != w.podName {
		t.Errorf("GET through kubectl port-forward = %q, want %q", got, w.podName)
	}
	return w
}

// portForward runs kubectl port-forward to the Deployment's pod and GETs
// through it.
func portForward(t *testing.T, w *workload) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.KubectlPath(t), "--kubeconfig", w.kubeconfig, "port-forward", "--address", "127.0.0.1", "pod/"+w.podName, ":8080")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// "Forwarding from 127.0.0.1:41234 -> 8080"
	re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
	sc := bufio.NewScanner(stdout)
	var port string
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			port = m[1]
			break
		}
	}
	if port == "" {
		t.Fatalf("kubectl port-forward printed no local port: %s", stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+port+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET through port-forward: %v (%s)", err, stderr.String())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// isolated: from's client pod reaches its own member's pod (the control),
// but neither other's pod IP nor its ClusterIP, nor other's API server.
func isolated(t *testing.T, from, other *workload) {
	t.Helper()
	if out, err := execIn(t, from, "dial", from.podIP+":8080"); err != nil {
		t.Fatalf("control: %s's client cannot reach its own pod %s: %v %s", from.pool, from.podIP, err, out)
	}
	for what, addr := range map[string]string{
		"pod IP":    other.podIP + ":8080",
		"ClusterIP": other.clusterIP + ":80",
	} {
		began := time.Now()
		out, err := execIn(t, from, "dial", addr)
		if err == nil {
			t.Errorf("%s's pod reached %s's %s %s: %s", from.pool, other.pool, what, addr, out)
			continue
		}
		t.Logf("%s -> %s's %s %s refused after %v: %v", from.pool, other.pool, what, addr, time.Since(began).Round(time.Millisecond), err)
	}
	// The other member's API server, on its own gateway address.
	if ep := other.member.Status.Endpoint; ep != "" {
		host := strings.TrimPrefix(ep, "https://")
		if out, err := execIn(t, from, "dial", host); err == nil {
			t.Errorf("%s's pod reached %s's API server %s: %s", from.pool, other.pool, host, out)
		}
	}
}

// podSecurity: baseline refuses privileged and hostPath pods (which would
// be root on the node and see the host's files); an ordinary pod cannot
// see the other member's keys or the operator's files.
func podSecurity(t *testing.T, w, other *workload) {
	t.Helper()
	otherKeys := memberDir(t, other.member)
	if _, err := os.Stat(otherKeys); err != nil {
		t.Fatalf("the other member's directory %s is not where the test looks: %v", otherKeys, err)
	}
	// The hostile suite's ways around Pod Security (every namespace write
	// path, every kind of pod that owns the node, in any namespace, through
	// a controller, PersistentVolumes), with the other member's keys as the
	// host path to mount.
	nodeName := testenv.MustKubectl(t, w.kubeconfig, "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}")
	hostile.PodSecurityHolds(t, hostile.Target{Kubeconfig: w.kubeconfig, Image: testappImage, RunningPod: "client", Node: nodeName, HostPath: otherKeys})
	// Nor can an ordinary pod read another member's keys or the
	// operator's files.
	for _, path := range []string{filepath.Join(otherKeys, "pki", "client-ca.key"), s.DataRoot, filepath.Join(s.Work, "tls.key")} {
		if out, err := execIn(t, w, "read", path); err == nil {
			t.Errorf("a pod of %s read %s: %.80s", w.pool, path, out)
		}
	}
}

// storageManifest is a claim of the default class and a Job that runs
// testapp with args on it (a Job: a pod of one run, as a CI step is).
// storageManifest is the claim "data" and Job job whose container c runs
// testapp with args on it; with service set, a second container "svc"
// fetches that URL (a Service by its name: cluster DNS and kube-proxy).
func storageManifest(job, service string, args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	svc := ""
	if service != "" {
		svc = `
      - name: svc
        image: ` + testappImage + `
        imagePullPolicy: Never
        command: [/testapp, get, ` + strconv.Quote(service) + `]`
	}
	return `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: ` + job + `
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: ` + testappImage + `
        imagePullPolicy: Never
        command: [/testapp, ` + strings.Join(q, ", ") + `]
        volumeMounts: [{name: data, mountPath: /data}]` + svc + `
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: data}
`
}

func storage(t *testing.T, w *workload) {
	if sc := testenv.MustKubectl(t, w.kubeconfig, "get", "storageclass", "-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.annotations.storageclass\.kubernetes\.io/is-default-class}{end}`); sc != "standard true" {
		t.Fatalf("storage classes: %q, want standard as the default", sc)
	}
	runJob := func(name, service string, args ...string) string {
		t.Helper()
		if out, err := testenv.Kubectl(t, w.kubeconfig, "apply", "-f", writeFile(t, storageManifest(name, service, args...))); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		if out, err := testenv.Kubectl(t, w.kubeconfig, "wait", "--for=condition=Complete", "job/"+name, "--timeout=60s"); err != nil {
			t.Fatalf("job %s did not complete: %v\n%s\n%s", name, err, out, describe(t, w))
		}
		return testenv.MustKubectl(t, w.kubeconfig, "logs", "job/"+name, "-c", "c")
	}
	runJob("writer", "", "write", "/data/hello", "kept across pods")
	pv := testenv.MustKubectl(t, w.kubeconfig, "get", "pvc", "data", "-o", "jsonpath={.spec.volumeName} {.status.phase}")
	name, phase, _ := strings.Cut(pv, " ")
	if phase != "Bound" || !strings.HasPrefix(name, "pvc-") {
		t.Fatalf("claim data: %q, want Bound to a pvc-<uid> volume", pv)
	}
	// The directory is on the node's disk, in the member's directory.
	dirs, _ := filepath.Glob(filepath.Join(memberDir(t, w.member), "nodes", "*", "storage", name))
	if len(dirs) != 1 {
		t.Fatalf("volume %s has %d directories under the member's nodes (%v), want 1", name, len(dirs), dirs)
	}
	// The check: a Job of the default pool's member reads the
	// volume back and reaches the Deployment by its Service's name.
	if got := runJob("reader", "http://testapp/", "read", "/data/hello"); got != "kept across pods" {
		t.Errorf("the second pod read %q from the claim", got)
	}
	if got := testenv.MustKubectl(t, w.kubeconfig, "logs", "job/reader", "-c", "svc"); !strings.HasPrefix(got, w.podName) {
		t.Errorf("the Job's GET http://testapp/ answered %q, want the Deployment's pod %s", got, w.podName)
	}
	testenv.MustKubectl(t, w.kubeconfig, "delete", "job", "writer", "reader", "--wait")
	testenv.MustKubectl(t, w.kubeconfig, "delete", "pvc", "data", "--wait")
	testenv.Eventually(t, time.Minute, "the released volume and its directory to be gone", func() error {
		if out, err := testenv.Kubectl(t, w.kubeconfig, "get", "pv", name); err == nil {
			return fmt.Errorf("PV still there: %s", out)
		}
		if _, err := os.Stat(dirs[0]); !os.IsNotExist(err) {
			return fmt.Errorf("directory %s: %w", dirs[0], err)
		}
		return nil
	})
}

// releaseLeavesNothing stops the pools from refilling, releases both leases
// and checks that no process, mount, link, nftables table, cgroup or file
// of any member is left.
func releaseLeavesNothing(t *testing.T, ws ...*workload) {
	ctx := t.Context()
	for _, w := range ws {
		p := &kobev1.ClusterPool{}
		if err := s.Env.Client.Get(ctx, types.NamespacedName{Namespace: kobesuite.Namespace, Name: w.pool}, p); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		p.Spec.Size = ptr.To[int32](0)
		if err := s.Env.Client.Patch(ctx, p, patch); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		proxied := w.lease.Kubeconfig != "" && strings.Contains(w.lease.Kubeconfig, "/connect/")
		var holder *testenv.Holder
		if !proxied {
			// Direct: the lease's certificate and a token minted inside
			// work until the member's API server is fenced, which kobe
			// does before it answers the release.
			holder = testenv.KeepCredentials(t, w.kubeconfig)
		}
		if out, errOut, err := s.Kobe(t, time.Minute, "release", w.lease.ID); err != nil {
			t.Fatalf("kobe release %s: %v\n%s%s", w.lease.ID, err, out, errOut)
		}
		released := time.Now()
		if proxied {
			// Through the proxy the lease's end is checked on every request.
			if _, err := testenv.Kubectl(t, w.kubeconfig, "get", "pods"); err == nil {
				t.Errorf("%s's kubeconfig still works through the proxy after kobe release", w.pool)
			}
			continue
		}
		holder.WaitCut(t, released, w.pool+"'s kobe release", nil)
	}
	testenv.Eventually(t, 2*time.Minute, "every member to be gone", func() error {
		var l kobev1.ClusterInstanceList
		if err := s.Env.Client.List(ctx, &l, client.InNamespace(kobesuite.Namespace)); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d members left", len(l.Items))
		}
		return nil
	})
	if err := leftovers(ctx, s.DataRoot); err != nil {
		t.Error(err)
	}
}

// leftovers lists what of local members is still on the machine: processes
// of the data root or in kobe's cgroups, mounts under the data root, member
// links, nftables tables and cgroups, member directories.
func leftovers(ctx context.Context, dataRoot string) error {
	var errs []error
	procs, err := memberproc.Running(dataRoot)
	if err != nil {
		errs = append(errs, err)
	}
	var left []string
	for _, p := range procs {
		if !strings.Contains(p.Cmdline, "kobe-operator") {
			left = append(left, p.String())
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && strings.Contains(string(b), ":/kobe/") {
			cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			left = append(left, e.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes left: %v", left))
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dataRoot) {
			errs = append(errs, fmt.Errorf("mount left: %s", l))
		}
	}
	if slots, err := node.UsedSlots(ctx); err != nil {
		errs = append(errs, err)
	} else if len(slots) > 0 {
		errs = append(errs, fmt.Errorf("member bridges left: %v", slots))
	}
	for slot := range node.MaxSlots {
		if links, _ := node.MemberLinks(ctx, slot); len(links) > 0 {
			errs = append(errs, fmt.Errorf("links left: %v", links))
		}
	}
	if out, err := exec.CommandContext(ctx, "nft", "list", "tables").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("listing nftables tables: %w: %s", err, out))
	} else if strings.Contains(string(out), "kobe-m") {
		errs = append(errs, fmt.Errorf("nftables tables left: %s", out))
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/kobe")
	if len(cgroups) > 0 {
		errs = append(errs, fmt.Errorf("cgroups left: %v", cgroups))
	}
	dirs, _ := os.ReadDir(dataRoot)
	for _, d := range dirs {
		if d.IsDir() {
			errs = append(errs, fmt.Errorf("member directory left: %s", d.Name()))
		}
	}
	return errors.Join(errs...)
}

func memberOf(t *testing.T, leaseID string) *kobev1.ClusterInstance {
	t.Helper()
	m, err := testenv.MemberOfLease(t.Context(), s.Env.Client, kobesuite.Namespace, leaseID)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// memberDir is the local backend's directory of a member:
// <data root>/<namespace>_<name>_<uid>.
func memberDir(t *testing.T, m *kobev1.ClusterInstance) string {
	t.Helper()
	d, err := memberproc.Dir(s.DataRoot, m.UID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// execIn runs /testapp args in w's client pod and returns what it printed.
func execIn(t *testing.T, w *workload, args ...string) (string, error) {
	t.Helper()
	// Only standard output: kubectl's websocket warnings ("Unknown stream
	// id") go to standard error.
	return testenv.KubectlStdout(t, w.kubeconfig, append([]string{"exec", "client", "--", "/testapp"}, args...)...)
}

func describe(t *testing.T, w *workload) string {
	out, _ := testenv.Kubectl(t, w.kubeconfig, "describe", "pods")
	ev, _ := testenv.Kubectl(t, w.kubeconfig, "get", "events", "-A")
	return out + "\n" + ev
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func serverLine(kubeconfig string) string {
	for _, l := range strings.Split(kubeconfig, "\n") {
		if strings.Contains(l, "server:") {
			return strings.TrimSpace(l)
		}
	}
	return "(no server line)"
}
