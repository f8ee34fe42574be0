//go:build root

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
	"github.com/kunobi-ninja/kobe/internal/wire"
	"github.com/kunobi-ninja/kobe/test/chart/install"
)

// TestRunCluster runs make run-cluster's program as make does: it prints
// make run's export lines, `kobe lease` with exactly those binds a lease
// from the demo pool, and SIGINT (Ctrl-C) ends it with status 0, the API
// gone and the machine as it was before.
func TestRunCluster(t *testing.T) {
	ctx := t.Context()
	for _, k := range []string{"HOSTCLUSTER_PAUSE_TAR", "HOSTCLUSTER_PAUSE_IMAGE", "KOBE_OPERATOR_TAR", "KOBE_IMAGE_REPOSITORY", "KOBE_IMAGE_TAG", "KOBE_CLI", "CONTROLPLANE_IMAGE_DIR"} {
		if os.Getenv(k) == "" {
			t.Fatalf("%s is unset: run `make test-run-cluster`", k)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kobe-run-cluster")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building kobe-run-cluster: %v\n%s", err, out)
	}
	if err := hostcluster.Teardown(ctx, hostcluster.DefaultDir); err != nil {
		t.Fatalf("teardown before the test: %v", err)
	}
	before, err := hostcluster.TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}

	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), fmt.Sprintf("KOBE_API_PORT=%d", port))
	// A process group of its own: the SIGINT below is the terminal's Ctrl-C
	// for it alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	started := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			t.Logf("kobe-run-cluster killed at cleanup: %v", <-exited)
		}
		_ = hostcluster.Teardown(context.Background(), hostcluster.DefaultDir)
	})

	// Read its output until the Ctrl-C line, keeping the export lines.
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var exports []string
	var caFile string // of the printed `bin/kobe lease` line
	var all strings.Builder
	deadline := time.After(5 * time.Minute)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kobe-run-cluster ended before it was ready:\n%s", all.String())
			}
			all.WriteString(l + "\n")
			if strings.HasPrefix(strings.TrimSpace(l), "export ") {
				exports = append(exports, strings.TrimSpace(l))
			}
			if f := strings.Fields(l); len(f) > 2 && f[0] == "bin/kobe" && f[1] == "lease" && f[len(f)-2] == "--ca-file" {
				caFile = f[len(f)-1]
			}
			if strings.HasPrefix(l, "Press Ctrl-C") {
				break wait
			}
		case <-deadline:
			t.Fatalf("kobe-run-cluster not ready after 5 min:\n%s", all.String())
		}
	}
	t.Logf("ready after %v:\n%s", time.Since(started).Round(time.Millisecond), all.String())
	go func() { // keep draining, so that it never blocks on its stdout
		for l := range lines {
			t.Log(l)
		}
	}()

	env := map[string]string{}
	for _, e := range exports {
		for _, kv := range strings.Fields(strings.TrimPrefix(e, "export ")) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	want := fmt.Sprintf("https://127.0.0.1:%d", port)
	if env["KOBE_ENDPOINT"] != want || env["KOBE_TOKEN"] == "" || env["KUBECONFIG"] == "" {
		t.Fatalf("export lines %q: want KOBE_ENDPOINT=%s, KOBE_TOKEN and KUBECONFIG", exports, want)
	}
	if caFile == "" {
		t.Fatalf("no `bin/kobe lease ... --ca-file FILE` line:\n%s", all.String())
	}
	kobe := exec.CommandContext(ctx, os.Getenv("KOBE_CLI"), "lease", "dev", "--ttl", "10m", "-o", "json", "--kubeconfig", filepath.Join(dir, "lease.kubeconfig"), "--ca-file", caFile)
	kobe.Env = append(os.Environ(), "KOBE_ENDPOINT="+env["KOBE_ENDPOINT"], "KOBE_TOKEN="+env["KOBE_TOKEN"], "KOBE_CONFIG="+filepath.Join(dir, "config.yaml"))
	out, err := kobe.Output()
	if err != nil {
		t.Fatalf("kobe lease dev with the printed exports: %v\n%s", err, out)
	}
	var l wire.Lease
	if err := json.Unmarshal(out, &l); err != nil || l.Phase != wire.PhaseBound {
		t.Fatalf("kobe lease dev: %s (%v), want Bound", out, err)
	}

	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	defaultPool(t, env, caFile, dir)

	stopping := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kobe-run-cluster after SIGINT: %v, want status 0", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("kobe-run-cluster still runs 3 min after SIGINT")
	}
	t.Logf("stopped %v after SIGINT", time.Since(stopping).Round(time.Millisecond))
	if _, err := os.Stat(caFile); !os.IsNotExist(err) {
		t.Errorf("the CA file %s is left after Ctrl-C (%v)", caFile, err)
	}
	if resp, err := get(install.HTTPClient(ca), want+"/readyz"); err == nil {
		t.Errorf("the API still answers after Ctrl-C: %s", resp)
	}
	after, err := hostcluster.TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Errorf("the machine differs after Ctrl-C (- before only, + after only):\n%s", d)
	}
}

// defaultPool does what the printed hint says: a pool that names no
// backend, created with kubectl and the printed KUBECONFIG, gets a Ready
// member of the kubernetes backend, and `kobe lease` of it with the printed
// exports returns a kubeconfig through kobe's connect proxy that answers
// kubectl get ns. Ctrl-C then has a kubernetes member to remove.
func defaultPool(t *testing.T, env map[string]string, caFile, dir string) {
	t.Helper()
	ctx := t.Context()
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, testenv.KubectlPath(t), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+env["KUBECONFIG"])
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	start := time.Now()
	kubectl(`apiVersion: kobe.kunobi.ninja/v1alpha1
kind: ClusterPool
metadata:
  name: default
  namespace: kobe-system
spec:
  size: 1
  backend:
    kubernetes:
      images:
        pullPolicy: Never
`, "apply", "-f", "-")
	kubectl("", "-n", "kobe-system", "wait", "--for=condition=Ready", "clusterpool/default", "--timeout=3m")
	t.Logf("pool default Ready %v after kubectl apply", time.Since(start).Round(time.Millisecond))
	kc := filepath.Join(dir, "default.kubeconfig")
	kobe := exec.CommandContext(ctx, os.Getenv("KOBE_CLI"), "lease", "default", "--ttl", "10m", "-o", "json", "--kubeconfig", kc, "--ca-file", caFile)
	kobe.Env = append(os.Environ(), "KOBE_ENDPOINT="+env["KOBE_ENDPOINT"], "KOBE_TOKEN="+env["KOBE_TOKEN"], "KOBE_CONFIG="+filepath.Join(dir, "config.yaml"))
	out, err := kobe.Output()
	if err != nil {
		t.Fatalf("kobe lease default: %v\n%s", err, out)
	}
	var l wire.Lease
	if err := json.Unmarshal(out, &l); err != nil || l.Phase != wire.PhaseBound {
		t.Fatalf("kobe lease default: %s (%v), want Bound", out, err)
	}
	server := kubectl("", "--kubeconfig", kc, "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	if want := env["KOBE_ENDPOINT"] + "/connect/" + l.ID; server != want {
		t.Fatalf("the lease's kubeconfig points at %q, want %s", server, want)
	}
	if ns := kubectl("", "--kubeconfig", kc, "get", "ns", "-o", "name"); !strings.Contains(ns, "namespace/kube-system") {
		t.Fatalf("kubectl get ns through the proxy: %s", ns)
	}
}

// get is the status of GET url with c (that trusts the API's CA, so that a
// certificate error cannot pass for the API being gone), or the error when
// nothing answers.
func get(c *http.Client, url string) (string, error) {
	c.Timeout = 2 * time.Second
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	return resp.Status, nil
}
