package scaling

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// operator is a kobe-operator process of a test's own, serving one
// namespace with the sim backend only, so that the test can restart it
// without disturbing the scenarios that share the suite's operator.
type operator struct {
	ns, log string
	cmd     *exec.Cmd
	api     *api
}

// ownNamespace creates a namespace with a token AccessPolicy for any pool
// and returns its name and the token.
func ownNamespace(t *testing.T) (ns, token string) {
	t.Helper()
	ns = s.Env.NewNamespace(t)
	token = fmt.Sprintf("scaling-own-%d", time.Now().UnixNano())
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "own-token", Namespace: ns}, StringData: map[string]string{"token": token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: ns},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "own-token"}}},
				Identity: "scaling-own",
				Rules:    []kobev1.AccessRule{{Pools: []string{"*"}}},
			},
		},
	} {
		if err := s.Env.Client.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
	return ns, token
}

// startOperator starts the suite's kobe-operator binary for ns (plain HTTP
// on loopback) and waits for its API. The test stops it at its end, after
// the clean-ups registered later, which need it.
func startOperator(t *testing.T, ns, token string) *operator {
	t.Helper()
	op := &operator{ns: ns, log: filepath.Join(t.TempDir(), "operator.log")}
	op.api = &api{token: token, http: http.DefaultClient}
	t.Cleanup(func() {
		op.stop(t)
		if t.Failed() {
			t.Logf("log of the operator of %s:\n%s", ns, op.tail())
		}
	})
	op.start(t)
	return op
}

// start runs the operator on a free port; after stop, it is a restart.
func (op *operator) start(t *testing.T) {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	op.api.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	logFile, err := os.OpenFile(op.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// The child holds its own descriptor; the test's copy can go.
	defer logFile.Close()
	op.cmd = exec.Command(filepath.Join(s.Bin, "kobe-operator"),
		"--kubeconfig", s.Env.Kubeconfig,
		"--namespace", op.ns,
		"--api-bind-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:0",
		"--enable-sim-backend",
		"--disable-local-backend",
		"--disable-kubernetes-backend",
	)
	op.cmd.Stdout, op.cmd.Stderr = logFile, logFile
	if err := op.cmd.Start(); err != nil {
		t.Fatalf("starting operator: %v", err)
	}
	err = testenv.Poll(t.Context(), time.Minute, func() error {
		resp, err := http.Get(op.api.url + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answers %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("operator API did not become ready: %v; log:\n%s", err, op.tail())
	}
}

// stop sends SIGTERM and waits (SIGKILL after 20 s); a second call does
// nothing.
func (op *operator) stop(t *testing.T) {
	if op.cmd == nil || op.cmd.ProcessState != nil {
		return
	}
	_ = op.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- op.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("operator of %s exited after SIGTERM: %v", op.ns, err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("operator of %s did not stop within 20s of SIGTERM; killing it", op.ns)
		_ = op.cmd.Process.Kill()
		if err := <-done; err != nil {
			t.Logf("operator of %s killed: %v", op.ns, err)
		}
	}
}

func (op *operator) tail() string {
	b, _ := os.ReadFile(op.log)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}
