//go:build e2e

// Package e2e runs kobe end to end: the real kobe-operator binary with the
// local backend against a real host API server, the real HTTP API, the real
// kobe CLI, and kubectl against the kubeconfigs leases return.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	namespace = "default"
	devPool   = "dev"
	// memberDeadline bounds waits that include building a member (a real
	// control plane: ~10-20 s each, slower when several start on 2 cores).
	memberDeadline = 4 * time.Minute
)

// suite is the shared fixture: one host control plane and one operator.
type suite struct {
	env      *testenv.Env
	work     string
	dataRoot string
	bin      string // directory with kobe-operator and kobe
	apiURL   string
	token    string
	operator *operatorproc.Process
}

var s *suite

func TestMain(m *testing.M) {
	code, err := runSuite(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func runSuite(m *testing.M) (int, error) {
	work, err := os.MkdirTemp("", "kobe-e2e-")
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
	return testenv.BuildCommands(s.bin, "kobe-operator", "kobe")
}

// install creates the demo token, its AccessPolicy and the dev pool.
func (s *suite) install() error {
	ctx := context.Background()
	s.token = "e2e-" + fmt.Sprint(time.Now().UnixNano())
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-token", Namespace: namespace}, StringData: map[string]string{"token": s.token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: namespace},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "e2e-token"}}},
				Identity: "e2e-ci",
				Rules:    []kobev1.AccessRule{{Pools: []string{"*"}, MaxExtensions: ptr.To[int32](2)}},
			},
		},
		newPool(devPool, 2),
	}
	for _, o := range objs {
		if err := s.env.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func newPool(name string, size int32) *kobev1.ClusterPool {
	return &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: kobev1.ClusterPoolSpec{
			Size:        ptr.To(size),
			TTL:         &metav1.Duration{Duration: 30 * time.Minute},
			Backend:     kobev1.BackendSpec{Type: kobev1.BackendLocal},
			HealthCheck: &kobev1.HealthCheckSpec{IntervalSeconds: 5, FailureThreshold: 3},
			// Every member runs: tests lease right after the pool is Ready
			// and expect a bind at once; TestFrozenHandOuts sets its own.
			Warm: &kobev1.WarmSpec{Running: ptr.To(size)},
		},
	}
}

// startOperator starts kobe-operator and waits for its API to answer; after
// killOperator it starts it again on the same ports.
func (s *suite) startOperator() error {
	var p *operatorproc.Process
	var err error
	if s.operator == nil {
		p, err = operatorproc.Start(operatorproc.Options{
			Binary: filepath.Join(s.bin, "kobe-operator"), Kubeconfig: s.env.Kubeconfig, Namespace: namespace,
			Dir: s.work, DataDir: s.dataRoot,
			Args: []string{
				"--lease-retention", "1h",
				// TestConcurrentLeases queues 15 leases of one caller at once,
				// beyond the default cap of 10 (covered in test/ha).
				"--max-queued-per-owner", "20",
				// TestConcurrentLeases holds more leases as one caller than the default cap.
				"--default-max-concurrent-leases", "0",
				// TestLeakSweepReports waits for a periodic sweep.
				"--leak-sweep-interval", "2s",
				// TestConcurrentLeases bursts against a sim pool: binding and
				// queueing are the same for every backend, and 25 real members
				// would cost the layer two minutes.
				"--enable-sim-backend",
			},
		})
	} else {
		p, err = s.operator.Restart()
	}
	if err != nil {
		return err
	}
	s.operator, s.apiURL = p, p.APIURL
	return p.WaitReady(context.Background(), 60*time.Second)
}

// killOperator kills the operator with SIGKILL, as a crash would.
func (s *suite) killOperator() { s.operator.Kill() }

func (s *suite) tail() string {
	if s.operator == nil {
		return ""
	}
	return s.operator.Tail(6000)
}

// teardown deletes every lease, pool and member through the operator, then
// stops it and checks that no member process or directory is left.
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
	s.killOperator()
	procs, err := memberProcesses(s.dataRoot)
	if err != nil {
		errs = append(errs, err)
	}
	if len(procs) > 0 {
		errs = append(errs, fmt.Errorf("member processes left after teardown: %v", procs))
		memberproc.Kill(procs)
	}
	dirs, err := memberproc.Dirs(s.dataRoot)
	if err != nil {
		errs = append(errs, err)
	}
	if len(dirs) > 0 {
		errs = append(errs, fmt.Errorf("member directories left after teardown: %v", dirs))
	}
	return errors.Join(errs...)
}

// memberProcesses lists the processes whose command line names root, other
// than the operator's own.
func memberProcesses(root string) ([]memberproc.Process, error) {
	all, err := memberproc.Running(root)
	if err != nil {
		return nil, err
	}
	var out []memberproc.Process
	for _, p := range all {
		if !strings.Contains(p.Cmdline, "kobe-operator") {
			out = append(out, p)
		}
	}
	return out, nil
}

// kobe runs the CLI with the suite's endpoint and token.
func kobe(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), memberDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "kobe"), args...)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+s.apiURL, "KOBE_TOKEN="+s.token, "KOBE_CONFIG="+filepath.Join(t.TempDir(), "config.yaml"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// api calls the HTTP API directly.
func api(t *testing.T, method, path, token string, body io.Reader) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.apiURL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func decodeLease(t *testing.T, b []byte) wire.Lease {
	t.Helper()
	var l wire.Lease
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("decoding lease %s: %v", b, err)
	}
	return l
}

func getPool(t *testing.T, name string) *kobev1.ClusterPool {
	t.Helper()
	p := &kobev1.ClusterPool{}
	if err := s.env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: name}, p); err != nil {
		t.Fatalf("reading pool %s: %v", name, err)
	}
	return p
}

// waitPoolReady waits until the pool has n Ready members.
func waitPoolReady(t *testing.T, name string, n int32) {
	t.Helper()
	testenv.Eventually(t, memberDeadline, fmt.Sprintf("pool %s to have %d ready members", name, n), func() error {
		if p := getPool(t, name); p.Status.Ready < n {
			return fmt.Errorf("status %+v", p.Status)
		}
		return nil
	})
}

func getLease(t *testing.T, id string) *kobev1.ClusterLease {
	t.Helper()
	l := &kobev1.ClusterLease{}
	err := s.env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: id}, l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading lease %s: %v", id, err)
	}
	return l
}

// instanceGone returns nil once a member's object, processes and data
// directory are all gone, else what is left.
func instanceGone(t *testing.T, name string) error {
	inst := &kobev1.ClusterInstance{}
	err := s.env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: name}, inst)
	if err == nil {
		return fmt.Errorf("instance %s still exists in phase %s", name, inst.Status.Phase)
	}
	dirs, err := memberproc.Dirs(s.dataRoot)
	if err != nil {
		return err
	}
	marker := memberproc.NameMarker(namespace, name)
	for _, d := range dirs {
		if strings.HasPrefix(d, marker) {
			return fmt.Errorf("data directory %s still exists", d)
		}
	}
	procs, err := memberProcesses(s.dataRoot)
	if err != nil {
		return err
	}
	for _, p := range procs {
		if strings.Contains(p.Cmdline, marker) {
			return fmt.Errorf("process %s still runs", p)
		}
	}
	return nil
}

// leaseCLI runs `kobe lease POOL -o json` and returns the lease and the
// kubeconfig path it wrote.
func leaseCLI(t *testing.T, pool string, extra ...string) (wire.Lease, string) {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	out, errOut, err := kobe(t, append([]string{"lease", pool, "--kubeconfig", kc, "-o", "json"}, extra...)...)
	if err != nil {
		t.Fatalf("kobe lease %s: %v\nstdout: %s\nstderr: %s\noperator:\n%s", pool, err, out, errOut, s.tail())
	}
	var l wire.Lease
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("kobe lease -o json printed %q: %v", out, err)
	}
	st, err := os.Stat(kc)
	if err != nil {
		t.Fatalf("kubeconfig not written: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %o, want 0600", st.Mode().Perm())
	}
	return l, kc
}
