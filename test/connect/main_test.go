// Package connect tests kobe's connect proxy end to end: the real
// kobe-operator binary serving its API over TLS, the local backend's real
// members in a pool with access mode Proxy, the real kobe CLI, and kubectl
// against the kubeconfigs leases return, which point at the proxy.
package connect

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	namespace = "default"
	pool      = "proxied"
	// memberDeadline bounds waits that include building a member.
	memberDeadline = 4 * time.Minute
	// connectLimit is the operator's --connect-max-in-flight: more than the
	// lease API's limit (its default, 200), so that the test can hold more
	// proxied watches than the lease API admits requests.
	connectLimit = 205
)

type suite struct {
	env      *testenv.Env
	work     string
	dataRoot string
	bin      string
	apiURL   string
	token    string
	caFile   string
	roots    *x509.CertPool
	operator *exec.Cmd
	opLog    *os.File
}

var s *suite

func TestMain(m *testing.M) {
	code, err := runSuite(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func runSuite(m *testing.M) (int, error) {
	work, err := os.MkdirTemp("", "kobe-connect-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	s = &suite{work: work, dataRoot: filepath.Join(work, "members"), bin: filepath.Join(work, "bin")}
	if err := s.build(); err != nil {
		return 1, err
	}
	env, stop, err := testenv.New(work)
	if err != nil {
		return 1, err
	}
	defer func() { _ = stop() }()
	s.env = env
	if err := s.install(); err != nil {
		return 1, err
	}
	if err := s.startOperator(); err != nil {
		return 1, err
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "operator log tail:\n%s\n", s.tail())
	}
	if err := s.teardown(); err != nil {
		return code, err
	}
	return code, nil
}

func (s *suite) build() error {
	for _, cmd := range []string{"kobe-operator", "kobe"} {
		c := exec.Command("go", "build", "-o", filepath.Join(s.bin, cmd), "./cmd/"+cmd)
		c.Dir = testenv.RepoRoot()
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", cmd, err, out)
		}
	}
	return nil
}

// install writes the API's CA and serving certificate (for 127.0.0.1 and
// localhost) and creates the token, its AccessPolicy and the Proxy pool.
func (s *suite) install() error {
	ca, err := pki.NewCA("kobe-api-test-ca", 24*time.Hour)
	if err != nil {
		return err
	}
	cert, key, err := ca.IssueServing("kobe-api", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 12*time.Hour)
	if err != nil {
		return err
	}
	s.caFile = filepath.Join(s.work, "ca.crt")
	for name, b := range map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(s.work, name), b, 0o600); err != nil {
			return err
		}
	}
	s.roots = x509.NewCertPool()
	s.roots.AppendCertsFromPEM(ca.CertPEM)

	ctx := context.Background()
	s.token = "connect-" + fmt.Sprint(time.Now().UnixNano())
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "connect-token", Namespace: namespace}, StringData: map[string]string{"token": s.token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "connect", Namespace: namespace},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "connect-token"}}},
				Identity: "connect-ci",
				Rules:    []kobev1.AccessRule{{Pools: []string{"*"}, MaxExtensions: ptr.To[int32](0)}},
			},
		},
		&kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: namespace},
			Spec: kobev1.ClusterPoolSpec{
				Size:        ptr.To[int32](2),
				TTL:         &metav1.Duration{Duration: 30 * time.Minute},
				Backend:     kobev1.BackendSpec{Type: kobev1.BackendLocal},
				Access:      &kobev1.AccessSpec{Mode: kobev1.AccessProxy},
				HealthCheck: &kobev1.HealthCheckSpec{IntervalSeconds: 5, FailureThreshold: 3},
			},
		},
	}
	for _, o := range objs {
		if err := s.env.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func (s *suite) startOperator() error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	s.apiURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	logFile, err := os.OpenFile(filepath.Join(s.work, "operator.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.bin, "kobe-operator"),
		"--kubeconfig", s.env.Kubeconfig,
		"--namespace", namespace,
		"--api-bind-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--api-tls-cert-file", filepath.Join(s.work, "tls.crt"),
		"--api-tls-key-file", filepath.Join(s.work, "tls.key"),
		"--api-tls-ca-file", s.caFile,
		"--connect-max-in-flight", fmt.Sprint(connectLimit),
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:0",
		"--disable-kubernetes-backend",
		"--local-bin-dir", testenv.BinDir(),
		"--local-data-dir", s.dataRoot,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting operator: %w", err)
	}
	s.operator, s.opLog = cmd, logFile
	c := s.client(nil)
	err = testenv.Poll(context.Background(), 60*time.Second, func() error {
		resp, err := c.Get(s.apiURL + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answers %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("operator API did not become ready: %w; log: %s", err, s.tail())
	}
	return nil
}

func (s *suite) tail() string {
	b, _ := os.ReadFile(filepath.Join(s.work, "operator.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// teardown deletes every lease, pool and member through the operator, then
// stops it and checks that no member process is left.
func (s *suite) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.env.Client
	_ = c.DeleteAllOf(ctx, &kobev1.ClusterLease{}, client.InNamespace(namespace))
	_ = c.DeleteAllOf(ctx, &kobev1.ClusterPool{}, client.InNamespace(namespace))
	_ = c.DeleteAllOf(ctx, &kobev1.ClusterInstance{}, client.InNamespace(namespace))
	var errs []error
	if err := testenv.Poll(ctx, 3*time.Minute, func() error {
		var l kobev1.ClusterInstanceList
		if err := c.List(ctx, &l, client.InNamespace(namespace)); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d members left", len(l.Items))
		}
		return nil
	}); err != nil {
		errs = append(errs, fmt.Errorf("deleting every member: %w", err))
	}
	_ = s.operator.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.operator.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = s.operator.Process.Kill()
		<-done
	}
	_ = s.opLog.Close()
	procs, err := memberproc.Running(s.dataRoot)
	if err != nil {
		errs = append(errs, err)
	}
	var left []memberproc.Process
	for _, p := range procs {
		if !strings.Contains(p.Cmdline, "kobe-operator") {
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("member processes left after teardown: %v", left))
		memberproc.Kill(left)
	}
	return errors.Join(errs...)
}

// client is an HTTPS client that trusts the API's CA and presents cert
// (none when nil).
func (s *suite) client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxConnsPerHost: 0}}
}

// kobe runs the CLI against the suite's API, trusting its CA.
func kobe(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), memberDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "kobe"), append(args, "--ca-file", s.caFile)...)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+s.apiURL, "KOBE_TOKEN="+s.token, "KOBE_CONFIG="+filepath.Join(t.TempDir(), "config.yaml"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// api calls the lease API with the suite's token.
func api(t *testing.T, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.apiURL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client(nil).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// lease takes a lease of the Proxy pool through the API and returns it
// with its kubeconfig written to a file.
func lease(t *testing.T, ttl string) (wire.Lease, string) {
	t.Helper()
	waitPoolReady(t, 1)
	code, b := api(t, http.MethodPost, "/v1/leases", strings.NewReader(fmt.Sprintf(`{"pool":%q,"ttl":%q}`, pool, ttl)))
	if code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("POST /v1/leases: %d %s", code, b)
	}
	var l wire.Lease
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("decoding lease %s: %v", b, err)
	}
	if l.Phase != wire.PhaseBound || l.Kubeconfig == "" {
		t.Fatalf("lease %+v is not Bound with a kubeconfig", l)
	}
	return l, testenv.KubeconfigFile(t, []byte(l.Kubeconfig))
}

func release(t *testing.T, id string) {
	t.Helper()
	if code, b := api(t, http.MethodDelete, "/v1/leases/"+id, nil); code/100 != 2 {
		t.Fatalf("DELETE /v1/leases/%s: %d %s", id, code, b)
	}
}

// waitPoolReady waits until the pool has n Ready members.
func waitPoolReady(t *testing.T, n int32) {
	t.Helper()
	testenv.Eventually(t, memberDeadline, fmt.Sprintf("pool %s to have %d ready members", pool, n), func() error {
		p := &kobev1.ClusterPool{}
		if err := s.env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: pool}, p); err != nil {
			return err
		}
		if p.Status.Ready < n {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
}

func getLease(t *testing.T, id string) *kobev1.ClusterLease {
	t.Helper()
	l := &kobev1.ClusterLease{}
	if err := s.env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: id}, l); err != nil {
		t.Fatalf("reading lease %s: %v", id, err)
	}
	return l
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
