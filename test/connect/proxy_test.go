//go:build heavy

package connect

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// leaseCert is the client certificate of a lease's kubeconfig, and checks
// that the kubeconfig points at the connect proxy with the API's CA.
func leaseCert(t *testing.T, l wire.Lease) tls.Certificate {
	t.Helper()
	cfg, err := clientcmd.Load([]byte(l.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		if want := s.APIURL + "/connect/" + l.ID; c.Server != want {
			t.Fatalf("kubeconfig server %q, want the connect proxy %q", c.Server, want)
		}
		ca, _ := os.ReadFile(s.CAFile)
		if string(c.CertificateAuthorityData) != string(ca) {
			t.Fatalf("kubeconfig CA is not the API's CA")
		}
	}
	for _, u := range cfg.AuthInfos {
		cert, err := tls.X509KeyPair(u.ClientCertificateData, u.ClientKeyData)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	t.Fatal("kubeconfig has no user")
	return tls.Certificate{}
}

// call sends one request through the proxy presenting cert (nil: none).
func call(t *testing.T, cert *tls.Certificate, method, path string, header http.Header, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.APIURL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := s.client(cert).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// refusedWith checks that a connect request got code with a JSON error body.
func refusedWith(t *testing.T, what string, code int, b []byte, want int) {
	t.Helper()
	var e wire.ErrorBody
	if code != want || json.Unmarshal(b, &e) != nil || e.Message == "" || e.Reason == "" {
		t.Errorf("%s: got %d %s, want %d with a JSON error", what, code, b, want)
	}
}

// kubectlWatch starts `kubectl get configmaps -w` and returns its output
// lines and a channel closed when it exits.
func kubectlWatch(t *testing.T, kc string) (lines chan string, exited chan struct{}) {
	t.Helper()
	cmd := exec.Command(testenv.KubectlPath(t), "--kubeconfig", kc, "get", "configmaps", "-n", "default", "-w")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines, exited = make(chan string, 100), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return lines, exited
}

func waitLine(t *testing.T, lines chan string, substr string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-lines:
			if strings.Contains(l, substr) {
				return
			}
		case <-deadline:
			t.Fatalf("the watch printed no line with %q", substr)
		}
	}
}

// memberRuns reports whether a process of member name still runs.
func memberRuns(t *testing.T, name string) bool {
	procs, err := memberproc.Running(s.DataRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if strings.Contains(p.Cmdline, memberproc.NameMarker(namespace, name)) && !strings.Contains(p.Cmdline, "kobe-operator") {
			return true
		}
	}
	return false
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: through-proxy
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: through-proxy}
  template:
    metadata:
      labels: {app: through-proxy}
    spec:
      containers:
      - name: c
        image: registry.k8s.io/pause:3.10
`

// TestKubectlThroughProxy: `kobe lease` of a Proxy pool returns a
// kubeconfig pointing at the connect proxy; kubectl get, apply and a -w
// stream work through it as the lease; after release the kubeconfig fails
// and the open watch is closed within a second, while the member still
// runs.
func TestKubectlThroughProxy(t *testing.T) {
	waitPoolReady(t, 1)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	out, errOut, err := kobe(t, "lease", pool, "--ttl", "10m", "--kubeconfig", kc, "-o", "json")
	if err != nil {
		t.Fatalf("kobe lease: %v\n%s%s\n%s", err, out, errOut, s.Tail())
	}
	var l wire.Lease
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("kobe lease -o json printed %q: %v", out, err)
	}
	b, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	l.Kubeconfig = string(b)
	leaseCert(t, l)

	if out, err := testenv.Kubectl(t, kc, "get", "ns"); err != nil || !strings.Contains(out, "kube-system") {
		t.Fatalf("kubectl get ns through the proxy: %v\n%s", err, out)
	}
	manifest := filepath.Join(t.TempDir(), "deploy.yaml")
	if err := os.WriteFile(manifest, []byte(deployment), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(t, kc, "apply", "-f", manifest); err != nil || !strings.Contains(out, "created") {
		t.Fatalf("kubectl apply through the proxy: %v\n%s", err, out)
	}
	if out, err := testenv.Kubectl(t, kc, "get", "deployment", "through-proxy", "-o", "name"); err != nil || out != "deployment.apps/through-proxy" {
		t.Fatalf("kubectl get deployment through the proxy: %v\n%s", err, out)
	}
	obj := getLease(t, l.ID)
	wantUser := leasecreds.CommonName(obj)
	if out, err := testenv.Kubectl(t, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); err != nil || out != wantUser {
		t.Fatalf("kubectl auth whoami through the proxy: %v %q, want %q", err, out, wantUser)
	}
	// A caller's own impersonation is not forwarded: the member still sees
	// the lease.
	if out, err := testenv.Kubectl(t, kc, "auth", "whoami", "--as", "system:admin", "--as-group", "evil", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"); err != nil || !strings.HasPrefix(out, wantUser+" ") || strings.Contains(out, "evil") {
		t.Fatalf("kubectl auth whoami --as through the proxy: %v %q, want %q without evil", err, out, wantUser)
	}

	lines, exited := kubectlWatch(t, kc)
	if out, err := testenv.Kubectl(t, kc, "create", "configmap", "watched"); err != nil {
		t.Fatalf("kubectl create configmap: %v\n%s", err, out)
	}
	waitLine(t, lines, "watched")
	select {
	case <-exited:
		t.Fatal("the watch ended before the release")
	default:
	}

	cert := leaseCert(t, l)
	if code, b := call(t, &cert, http.MethodGet, "/connect/"+l.ID+"/api", nil, nil); code != http.StatusOK {
		t.Fatalf("GET /api through the proxy before release: %d %s", code, b)
	}
	release(t, l.ID)
	released := time.Now()

	var refusedAfter time.Duration
	testenv.Eventually(t, 5*time.Second, "the proxy to refuse the released lease", func() error {
		code, b := call(t, &cert, http.MethodGet, "/connect/"+l.ID+"/api", nil, nil)
		if code != http.StatusGone {
			return fmt.Errorf("%d %s", code, b)
		}
		refusedAfter = time.Since(released)
		return nil
	})
	var closedAfter time.Duration
	select {
	case <-exited:
		closedAfter = time.Since(released)
	case <-time.After(5 * time.Second):
		t.Fatal("kubectl get -w still runs 5 s after the release")
	}
	stillRuns := memberRuns(t, l.ClusterName)
	t.Logf("after release: proxy refused within %s, kubectl get -w closed within %s; member %s still running: %v",
		refusedAfter.Round(time.Millisecond), closedAfter.Round(time.Millisecond), l.ClusterName, stillRuns)
	if refusedAfter > time.Second || closedAfter > time.Second {
		t.Errorf("release took effect after %s (request) and %s (watch), want within 1 s", refusedAfter, closedAfter)
	}
	if !stillRuns {
		t.Errorf("member %s was already torn down when its watch closed: the close came from the teardown, not the proxy", l.ClusterName)
	}
	if out, err := testenv.Kubectl(t, kc, "get", "ns"); err == nil {
		t.Errorf("kubectl get ns works after release: %s", out)
	}
	// A certificate that does not name the lease learns nothing of its
	// state: 403, not the holder's 410.
	code, body := call(t, selfSigned(t, "kobe-lease:someone-else"), http.MethodGet, "/connect/"+l.ID+"/api", nil, nil)
	refusedWith(t, "a stranger's certificate on a released lease", code, body, http.StatusForbidden)
}
