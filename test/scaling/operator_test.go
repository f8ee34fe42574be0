//go:build heavy

package scaling

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// operator is a kobe-operator process of a test's own, serving one
// namespace with the sim backend only, so that the test can restart it
// without disturbing the scenarios that share the suite's operator.
type operator struct {
	ns   string
	proc *operatorproc.Process
	api  *api
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
	p, err := operatorproc.Start(operatorproc.Options{
		Binary: filepath.Join(s.Bin, "kobe-operator"), Kubeconfig: s.Env.Kubeconfig, Namespace: ns, Dir: t.TempDir(),
		Args: []string{"--enable-sim-backend", "--disable-local-backend", "--disable-kubernetes-backend"},
	})
	if err != nil {
		t.Fatal(err)
	}
	op := &operator{ns: ns, proc: p, api: &api{url: p.APIURL, token: token, http: http.DefaultClient}}
	t.Cleanup(func() {
		op.stop(t)
		if t.Failed() {
			t.Logf("log of the operator of %s:\n%s", ns, op.proc.Tail(8000))
		}
	})
	op.waitReady(t)
	return op
}

// restart stops the operator and starts it again on the same ports.
func (op *operator) restart(t *testing.T) {
	t.Helper()
	op.stop(t)
	p, err := op.proc.Restart()
	if err != nil {
		t.Fatal(err)
	}
	op.proc = p
	op.waitReady(t)
}

func (op *operator) waitReady(t *testing.T) {
	t.Helper()
	if err := op.proc.WaitReady(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
}

// stop sends SIGTERM and waits (SIGKILL after 20 s); a second call does
// nothing.
func (op *operator) stop(t *testing.T) {
	if err := op.proc.Stop(); err != nil {
		t.Errorf("operator of %s: %v", op.ns, err)
	}
}
