//go:build heavy

// Package connect tests kobe's connect proxy end to end: the real
// kobe-operator binary serving its API over TLS, the local backend's real
// members in a pool with access mode Proxy, the real kobe CLI, and kubectl
// against the kubeconfigs leases return, which point at the proxy.
package connect

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/kobesuite"
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

// suite is kobesuite's operator with the Proxy pool.
type suite struct {
	*kobesuite.Suite
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
	ks, err := kobesuite.New(work)
	if err != nil {
		return 1, err
	}
	s = &suite{ks}
	code, err := s.run(m)
	if code != 0 {
		fmt.Fprintf(os.Stderr, "operator log tail:\n%s\n", s.Tail())
	}
	return code, errors.Join(err, s.Teardown())
}

// run creates the token, its AccessPolicy and the Proxy pool, starts the
// operator and runs the tests.
func (s *suite) run(m *testing.M) (int, error) {
	ctx := context.Background()
	if err := s.CreatePolicy(ctx, "connect-ci", kobev1.AccessRule{Pools: []string{"*"}, MaxExtensions: ptr.To[int32](0)}); err != nil {
		return 1, err
	}
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: namespace},
		Spec: kobev1.ClusterPoolSpec{
			Size:        ptr.To[int32](2),
			TTL:         &metav1.Duration{Duration: 30 * time.Minute},
			Backend:     kobev1.BackendSpec{Type: kobev1.BackendLocal},
			Access:      &kobev1.AccessSpec{Mode: kobev1.AccessProxy},
			HealthCheck: &kobev1.HealthCheckSpec{IntervalSeconds: 5, FailureThreshold: 3},
			// Both members run: the tests lease them back to back and
			// expect each bound at once (test/e2e covers frozen members).
			Warm: &kobev1.WarmSpec{Running: ptr.To[int32](2)},
		},
	}
	if err := s.Env.Client.Create(ctx, p); err != nil {
		return 1, fmt.Errorf("creating pool %s: %w", pool, err)
	}
	// One lease holds every watch of TestConnectLimit: its own cap must
	// not be what refuses them.
	if err := s.StartOperator("--connect-max-in-flight", fmt.Sprint(connectLimit), "--connect-max-streams-per-lease", fmt.Sprint(connectLimit+1),
		"--disable-kubernetes-backend"); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// client is an HTTPS client that trusts the API's CA and presents cert
// (none when nil).
func (s *suite) client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: s.Roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxConnsPerHost: 0}}
}

// kobe runs the CLI against the suite's API, trusting its CA.
func kobe(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return s.Kobe(t, memberDeadline, args...)
}

// api calls the lease API with the suite's token.
func api(t *testing.T, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	return apiAs(t, s.Token, method, path, body)
}

// apiAs calls the lease API with token.
func apiAs(t *testing.T, token, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, s.APIURL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
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
// with its kubeconfig written to a file. A lease queued because the pool's
// status still counted a member that an earlier test's lease took (202)
// is waited for until Bound.
func lease(t *testing.T, ttl string) (wire.Lease, string) {
	t.Helper()
	waitPoolReady(t, 1)
	code, b := api(t, http.MethodPost, "/v1/leases", strings.NewReader(fmt.Sprintf(`{"pool":%q,"ttl":%q}`, pool, ttl)))
	if code != http.StatusCreated && code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("POST /v1/leases: %d %s", code, b)
	}
	var l wire.Lease
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("decoding lease %s: %v", b, err)
	}
	if code == http.StatusAccepted {
		testenv.Eventually(t, memberDeadline, fmt.Sprintf("queued lease %s to be Bound", l.ID), func() error {
			code, b := api(t, http.MethodGet, "/v1/leases/"+l.ID, nil)
			if code != http.StatusOK {
				return fmt.Errorf("GET /v1/leases/%s: %d %s", l.ID, code, b)
			}
			l = wire.Lease{}
			if err := json.Unmarshal(b, &l); err != nil {
				return err
			}
			if l.Phase != wire.PhaseBound {
				return fmt.Errorf("phase %s", l.Phase)
			}
			return nil
		})
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
		if err := s.Env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: pool}, p); err != nil {
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
	if err := s.Env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: id}, l); err != nil {
		t.Fatalf("reading lease %s: %v", id, err)
	}
	return l
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
