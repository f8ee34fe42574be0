//go:build e2e && heavy

package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend/sim"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// simOperator is a kobe-operator process of its own, serving one namespace
// of the suite's API server beside the suite's operator.
type simOperator struct {
	*operatorproc.Process
}

// startSimOperator starts the real kobe-operator binary for namespace ns
// with extra flags, and waits for its API to answer.
func startSimOperator(t *testing.T, ns string, extra ...string) *simOperator {
	t.Helper()
	p, err := operatorproc.Start(operatorproc.Options{
		Binary: filepath.Join(s.bin, "kobe-operator"), Kubeconfig: s.env.Kubeconfig, Namespace: ns, Dir: t.TempDir(), Args: extra,
	})
	if err != nil {
		t.Fatal(err)
	}
	op := &simOperator{p}
	t.Cleanup(func() {
		op.stop(t)
		if t.Failed() {
			t.Logf("operator %v log:\n%s", extra, op.tail())
		}
	})
	if err := p.WaitReady(t.Context(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return op
}

// stop sends SIGTERM and waits, then kills; it may be called twice.
func (op *simOperator) stop(t *testing.T) {
	if err := op.Stop(); err != nil {
		t.Error(err)
	}
}

func (op *simOperator) tail() string { return op.Tail(6000) }

// post calls POST /v1/leases on this operator.
func (op *simOperator) post(t *testing.T, token, body string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, op.APIURL+"/v1/leases", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/leases: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer to POST /v1/leases: %v", err)
	}
	return resp.StatusCode, b, resp.Header
}

// TestSimBackendNeedsItsFlag proves that the sim backend cannot be used
// without --enable-sim-backend: the real operator binary without the flag
// creates no member for a sim pool (watched from before the pool exists),
// the pool's condition names the flag, and POST /v1/leases answers 503 with
// a JSON reason at once. The same pool then fills under an operator started
// with the flag, and a lease's kubeconfig points at the simulated endpoint
// with a certificate the member's client CA signed.
func TestSimBackendNeedsItsFlag(t *testing.T) {
	ctx := t.Context()
	c := s.env.Client
	ns := s.env.NewNamespace(t)
	token := "sim-e2e-" + fmt.Sprint(time.Now().UnixNano())
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sim-token", Namespace: ns}, StringData: map[string]string{"token": token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "sim", Namespace: ns},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "sim-token"}}},
				Identity: "sim-e2e",
				Rules:    []kobev1.AccessRule{{Pools: []string{"*"}}},
			},
		},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}

	// Any member ever created in the namespace shows up on this watch,
	// even one deleted again at once.
	wc, err := client.NewWithWatch(s.env.Config, client.Options{Scheme: s.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &kobev1.ClusterInstanceList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	without := startSimOperator(t, ns)
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: "sim", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To[int32](3),
			TTL:  &metav1.Duration{Duration: 30 * time.Minute},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendSim,
				Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: time.Second}}},
		},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()

	testenv.Eventually(t, 20*time.Second, "the sim pool to report its backend unavailable, naming the flag", func() error {
		got := &kobev1.ClusterPool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionCapacity)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != kobev1.ReasonBackendUnavailable ||
			cond.ObservedGeneration != got.Generation || !strings.Contains(cond.Message, "--enable-sim-backend") {
			return fmt.Errorf("Capacity condition %+v", cond)
		}
		return nil
	})

	code, body, hdr := without.post(t, token, `{"pool":"sim","ttl":"10m"}`)
	var eb wire.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("POST /v1/leases answered %d with a body that is not JSON: %q", code, body)
	}
	if code != http.StatusServiceUnavailable || eb.Reason != wire.ReasonBackendUnavailable ||
		!strings.Contains(eb.Detail, "--enable-sim-backend") || hdr.Get("Retry-After") == "" {
		t.Errorf("POST /v1/leases = %d %s (Retry-After %q); want 503 BackendUnavailable naming the flag", code, body, hdr.Get("Retry-After"))
	}
	var leases kobev1.ClusterLeaseList
	if err := c.List(ctx, &leases, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 0 {
		t.Errorf("a refused request left %d leases", len(leases.Items))
	}

	// Let the operator run a few seconds with the pool (readyAfter is 1s):
	// nothing may be created.
	testenv.Consistently(t, max(time.Until(applied.Add(4*time.Second)), 0), "no member from the operator without --enable-sim-backend", func() error {
		if ev := drain(w); len(ev) > 0 {
			return fmt.Errorf("members created: %v", ev)
		}
		var none kobev1.ClusterInstanceList
		if err := c.List(ctx, &none, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing members: %w", err)
		}
		if len(none.Items) > 0 {
			return fmt.Errorf("members in the namespace: %d", len(none.Items))
		}
		return nil
	})
	if strings.Contains(without.tail(), "enable-sim-backend is set") {
		t.Error("the operator without the flag logged that the sim backend is enabled")
	}
	without.stop(t)

	// With the flag, the same pool fills.
	started := time.Now()
	with := startSimOperator(t, ns, "--enable-sim-backend")
	// Registered after the operator's own clean-up, so it runs first: the
	// members' finalizers need the operator.
	t.Cleanup(func() { deleteSimPool(t, ns, p.Name) })
	if !strings.Contains(with.tail(), "WARNING: --enable-sim-backend is set") {
		t.Errorf("no start-up warning in the log:\n%s", with.tail())
	}
	testenv.Eventually(t, 30*time.Second, "the sim pool to have 3 Ready members", func() error {
		got := &kobev1.ClusterPool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		if got.Status.Ready < 3 {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	t.Logf("3 sim members Ready %s after the operator with the flag was started (readyAfter 1s)", time.Since(started).Round(time.Millisecond))
	var members kobev1.ClusterInstanceList
	if err := c.List(ctx, &members, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(members.Items) != 3 {
		t.Errorf("%d members, want 3", len(members.Items))
	}
	// The watch that saw nothing above sees these: the check has teeth.
	added := map[string]bool{}
	testenv.Eventually(t, 10*time.Second, "the watch to deliver the 3 new members", func() error {
		for _, e := range drain(w) {
			if name, ok := strings.CutPrefix(e, string(watch.Added)+" "); ok {
				added[name] = true
			}
		}
		if len(added) < 3 {
			return fmt.Errorf("added so far: %v", added)
		}
		return nil
	})
	for _, m := range members.Items {
		if m.Status.Phase != kobev1.InstanceReady || m.Status.Endpoint != sim.Endpoint || m.Status.Access == nil {
			t.Errorf("member %s: phase %s endpoint %q access %v", m.Name, m.Status.Phase, m.Status.Endpoint, m.Status.Access)
		}
	}

	// A lease: Bound at once, with a kubeconfig for the simulated endpoint.
	code, body, _ = with.post(t, token, `{"pool":"sim","ttl":"10m"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/leases = %d %s; want 201 Bound", code, body)
	}
	l := decodeLease(t, body)
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(l.Kubeconfig))
	if err != nil {
		t.Fatalf("lease %s kubeconfig: %v", l.ID, err)
	}
	if cfg.Host != sim.Endpoint {
		t.Errorf("lease kubeconfig server %q, want %q", cfg.Host, sim.Endpoint)
	}
	a := accesstest.FromOperator(t, c, ns, l.ClusterName)
	certs, err := certutil.ParseCertsPEM(cfg.CertData)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.ClientCACert)
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("lease certificate does not verify against member %s's client CA: %v", l.ClusterName, err)
	}
	if string(cfg.CAData) != string(a.CACert) {
		t.Errorf("lease kubeconfig CA is not member %s's serving CA", l.ClusterName)
	}
}

// drain returns the events a watch has delivered so far, without waiting.
func drain(w watch.Interface) []string {
	var out []string
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			name := ""
			if o, ok := e.Object.(client.Object); ok {
				name = o.GetName()
			}
			out = append(out, fmt.Sprintf("%s %s", e.Type, name))
		default:
			return out
		}
	}
}

// deleteSimPool deletes the test's leases and pool while an operator still
// runs (members carry finalizers), and waits for the members to go.
func deleteSimPool(t *testing.T, ns, pool string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.env.Client
	_ = c.DeleteAllOf(ctx, &kobev1.ClusterLease{}, client.InNamespace(ns))
	_ = c.Delete(ctx, &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: ns}})
	if err := testenv.Poll(ctx, 30*time.Second, func() error {
		var l kobev1.ClusterInstanceList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d members left", len(l.Items))
		}
		return nil
	}); err != nil {
		t.Errorf("deleting the sim pool: %v", err)
	}
}
