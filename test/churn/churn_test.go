//go:build root

// Package churn is issue 42's churn test: on `make run` as root (members
// with a node), one pool's members are leased and released without pause,
// another pool's bootstrap always fails (its members are destroyed as soon
// as they are built), and two steady pools stand beside them. For
// KOBE_CHURN_DURATION (10 minutes by default) no member may fail to start
// its node, every lease works with kubectl, and the steady members stay
// the same members, Ready. Then SIGTERM to make run's whole process group
// (what a CI cancellation does) must leave no process, directory, cgroup,
// fence, mount or bridge. Needs root (make test-node runs it).
package churn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/backend/local/nodetest"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
)

const (
	// startDeadline bounds make run up to "kobe is running" (its binaries
	// are built by make test-node before this test).
	startDeadline = 6 * time.Minute
	// readyDeadline bounds four pools filling with members with a node on
	// two busy cores.
	readyDeadline = 6 * time.Minute
	// cycleDeadline bounds one lease, kubectl and release: a lease may wait
	// for the pool's next member (about 20 s with a node).
	cycleDeadline = 4 * time.Minute
	// stopDeadline bounds the stop by one signal to the group.
	stopDeadline = 90 * time.Second
)

// pools are what the test adds to make run's demo pool "dev" (which
// churns): two steady pools, and one whose bootstrap applies an object in
// a namespace nothing creates, so each of its members fails once built.
const pools = `
apiVersion: kobe.kunobi.ninja/v1alpha1
kind: BootstrapConfig
metadata: {name: broken}
spec:
  manifests:
  - name: 10-orphan.yaml
    content: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: orphan, namespace: nowhere}
---
apiVersion: kobe.kunobi.ninja/v1alpha1
kind: ClusterPool
metadata: {name: broken}
spec:
  size: 1
  ttl: 30m
  backend: {type: local}
  bootstraps: [{name: broken}]
---
apiVersion: kobe.kunobi.ninja/v1alpha1
kind: ClusterPool
metadata: {name: steady-a}
spec:
  size: 1
  ttl: 30m
  backend: {type: local}
---
apiVersion: kobe.kunobi.ninja/v1alpha1
kind: ClusterPool
metadata: {name: steady-b}
spec:
  size: 1
  ttl: 30m
  backend: {type: local}
`

func TestMembersSurviveTheirNeighboursChurn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("members with a node need root (run make test-node as root)")
	}
	duration := 10 * time.Minute
	if s := os.Getenv("KOBE_CHURN_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("KOBE_CHURN_DURATION=%q: %v", s, err)
		}
		duration = d
	}
	bridgesBefore := memberproc.Bridges()
	// The machine-wide settings kubelet and kobe-node change go back.
	restore, err := nodetest.SaveSysctls()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("restoring the kernel settings: %v", err)
		}
	})
	r := startMakeRun(t)

	manifest := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(manifest, []byte(pools), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(t, r.kubeconfig, "apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	want := map[string]string{"dev": "2", "steady-a": "1", "steady-b": "1"}
	testenv.Eventually(t, readyDeadline, "pools dev, steady-a and steady-b to be full", func() error {
		r.running(t)
		for pool, n := range want {
			got, err := testenv.KubectlStdout(t, r.kubeconfig, "get", "clusterpool", pool, "-o", "jsonpath={.status.ready}")
			if err != nil {
				return err
			}
			if got != n {
				return fmt.Errorf("pool %s: %q Ready members, want %s", pool, got, n)
			}
		}
		return nil
	})
	steady := r.steadyMembers(t)
	t.Logf("steady members %v; churning for %s", steady, duration)

	start := time.Now()
	cycles := 0
	for time.Since(start) < duration {
		r.running(t)
		r.leaseAndRelease(t)
		cycles++
		r.noNodeFailed(t)
		if got := r.steadyMembers(t); !slices.Equal(got, steady) {
			t.Fatalf("after %d cycles the steady pools' Ready members are %v, were %v", cycles, got, steady)
		}
	}
	broken, _ := testenv.KubectlStdout(t, r.kubeconfig, "get", "events", "--field-selector", "reason=BootstrapFailed", "-o", "name")
	t.Logf("%d lease cycles of pool dev in %s; %d BootstrapFailed events of pool broken", cycles, time.Since(start).Round(time.Second), len(strings.Fields(broken)))
	if cycles < 2 || broken == "" {
		t.Fatalf("no churn: %d lease cycles, BootstrapFailed events %q", cycles, broken)
	}

	r.stopByGroupSignal(t)
	if added := slices.DeleteFunc(memberproc.Bridges(), func(b string) bool { return slices.Contains(bridgesBefore, b) }); len(added) > 0 {
		t.Fatalf("member bridges left after the stop: %v", added)
	}
}

// makeRun is a running make run.
type makeRun struct {
	cmd               *exec.Cmd
	exited            chan error
	out               *testenv.Output
	state, kubeconfig string
	kobeEnv           []string
	memberUIDs        map[string]bool
}

// startMakeRun starts make run as typed in a shell, in a process group of
// its own, and waits until it says kobe is running.
func startMakeRun(t *testing.T) *makeRun {
	state := t.TempDir()
	port, err := testenv.FreeFixedPort()
	if err != nil {
		t.Fatal(err)
	}
	r := &makeRun{
		cmd:        exec.Command("make", "--no-print-directory", "run"),
		exited:     make(chan error, 1),
		out:        &testenv.Output{},
		state:      state,
		kubeconfig: filepath.Join(state, "host.kubeconfig"),
		memberUIDs: map[string]bool{},
	}
	r.cmd.Dir = testenv.RepoRoot()
	r.cmd.Env = append(testenv.ShellEnv(), "KOBE_API_PORT="+strconv.Itoa(port), "KOBE_STATE_DIR="+state)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r.kobeEnv = append(os.Environ(), "KOBE_CONFIG="+filepath.Join(state, "kobe.yaml"), "KOBE_ENDPOINT=https://127.0.0.1:"+strconv.Itoa(port))
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting make run: %v", err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		// Whatever happened, leave the machine clean.
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		for range 3 {
			left, _ := memberproc.Running(state + "/")
			if len(left) == 0 {
				break
			}
			memberproc.Kill(left)
			time.Sleep(time.Second)
		}
		if t.Failed() {
			t.Logf("make run's output:\n%s", r.out)
			if b, err := os.ReadFile(filepath.Join(state, "operator.log")); err == nil {
				t.Logf("operator.log (end):\n%s", b[max(0, len(b)-8000):])
			}
		}
	})
	testenv.Eventually(t, startDeadline, "make run to say kobe is running", func() error {
		r.running(t)
		if strings.Contains(r.out.String(), "kobe is running") {
			return nil
		}
		return errors.New("not yet")
	})
	return r
}

// running fails the test if make run has exited.
func (r *makeRun) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.exited:
		r.exited <- err
		t.Fatalf("make run exited: %v", err)
	default:
	}
	// Every member seen, for the check after the stop.
	dirs, _ := memberproc.Dirs(filepath.Join(r.state, "members"))
	for _, uid := range memberproc.UIDsOf(dirs) {
		r.memberUIDs[uid] = true
	}
}

// steadyMembers are the names of the Ready members of pools steady-a and
// steady-b.
func (r *makeRun) steadyMembers(t *testing.T) []string {
	t.Helper()
	out, err := testenv.KubectlStdout(t, r.kubeconfig, "get", "clusterinstances",
		"-o", `jsonpath={range .items[?(@.status.phase=="Ready")]}{.metadata.name}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(slices.Values(slices.DeleteFunc(strings.Fields(out), func(n string) bool {
		return !strings.HasPrefix(n, "pool-steady-")
	})))
}

// leaseAndRelease leases a member of pool dev, runs kubectl with the
// lease's kubeconfig and releases it (kobe run), so the member is
// destroyed and a new one built.
func (r *makeRun) leaseAndRelease(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cycleDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(), "bin", "kobe"), "run", "dev", "--ttl", "10m", "--",
		testenv.KubectlPath(t), "get", "nodes", "-o", "name")
	cmd.Env = r.kobeEnv
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "node/") {
		r.noNodeFailed(t)
		t.Fatalf("kobe run dev -- kubectl get nodes: %v\n%s", err, out)
	}
}

// noNodeFailed fails the test when any member failed in its backend
// (ProvisionFailed: a process of it exited, its node did not start),
// saying why and where its logs are kept.
func (r *makeRun) noNodeFailed(t *testing.T) {
	t.Helper()
	out, err := testenv.KubectlStdout(t, r.kubeconfig, "get", "events", "--field-selector", "reason=ProvisionFailed",
		"-o", `jsonpath={range .items[*]}{.involvedObject.name}: {.message}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	if out != "" {
		t.Fatalf("members failed in the backend while their neighbours churned:\n%s", out)
	}
}

// stopByGroupSignal sends SIGTERM to make run's process group once and
// checks that nothing of any member seen is left.
func (r *makeRun) stopByGroupSignal(t *testing.T) {
	t.Helper()
	r.running(t)
	sent := time.Now()
	if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to make run's process group: %v", err)
	}
	select {
	case err := <-r.exited:
		t.Logf("make run exited %s after SIGTERM to its group (%v)", time.Since(sent).Round(100*time.Millisecond), err)
	case <-time.After(stopDeadline):
		left, _ := memberproc.Running(r.state + "/")
		t.Fatalf("make run still runs %s after SIGTERM to its group; processes of the run: %v", stopDeadline, left)
	}
	if err := testenv.Poll(t.Context(), 10*time.Second, func() error {
		left, err := memberproc.Running(r.state + "/")
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("processes of the run left: %v", left)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if dirs, err := memberproc.Dirs(filepath.Join(r.state, "members")); err != nil || len(dirs) > 0 {
		t.Fatalf("member directories left after the stop: %v (%v)", dirs, err)
	}
	uids := make([]string, 0, len(r.memberUIDs))
	for uid := range r.memberUIDs {
		uids = append(uids, uid)
	}
	if left := memberproc.Left(r.state, uids); len(left) > 0 {
		t.Fatalf("left of the %d members seen after the stop: %v", len(uids), left)
	}
}
