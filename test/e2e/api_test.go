//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestConcurrentLeases: 20 concurrent POSTs against a pool of 5 bind exactly
// 5 at once, queue the rest, bind those as replacements become Ready, and
// never bind one member twice. The pool is a sim pool: binding, queueing and
// refill go through the same operator code for every backend, and the
// local backend's real members are leased by the other tests here.
func TestConcurrentLeases(t *testing.T) {
	const poolName, size, callers = "burst", 5, 20
	burst := func() *kobev1.ClusterPool {
		p := newPool(poolName, size)
		p.Spec.Backend = kobev1.BackendSpec{Type: kobev1.BackendSim,
			Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: 200 * time.Millisecond}}}
		return p
	}
	if err := s.env.Client.Create(t.Context(), burst()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.env.Client.Delete(context.Background(), burst()) })
	waitPoolReady(t, poolName, size)

	type answer struct {
		code  int
		lease wire.Lease
	}
	answers := make([]answer, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, _ := api(t, http.MethodPost, "/v1/leases", s.token, strings.NewReader(`{"pool":"burst","ttl":"10m"}`))
			answers[i] = answer{code: code, lease: decodeLease(t, body)}
		}()
	}
	wg.Wait()

	bound, pending := 0, map[string]bool{}
	for _, a := range answers {
		switch a.code {
		case http.StatusCreated:
			bound++
			if a.lease.Phase != wire.PhaseBound || a.lease.Kubeconfig == "" {
				t.Errorf("201 answer without a bound lease and kubeconfig: %+v", a.lease)
			}
		case http.StatusAccepted:
			pending[a.lease.ID] = true
			if a.lease.Phase != wire.PhasePending {
				t.Errorf("202 answer with phase %s", a.lease.Phase)
			}
		default:
			t.Errorf("unexpected status %d: %+v", a.code, a.lease)
		}
	}
	if bound != size || len(pending) != callers-size {
		t.Fatalf("%d bound and %d pending at once, want %d and %d", bound, len(pending), size, callers-size)
	}

	// Release bound leases as they come so that the pool keeps refilling,
	// and record which member each lease got.
	memberOf := map[string]string{}
	released := map[string]bool{}
	testenv.Eventually(t, 2*time.Minute, "every queued lease to be bound", func() error {
		for _, a := range answers {
			id := a.lease.ID
			if released[id] {
				continue
			}
			code, body, _ := api(t, http.MethodGet, "/v1/leases/"+id, s.token, nil)
			if code != http.StatusOK {
				t.Fatalf("GET lease %s: %d %s", id, code, body)
			}
			l := decodeLease(t, body)
			if l.Phase != wire.PhaseBound {
				continue
			}
			for other, m := range memberOf {
				if m == l.ClusterName && other != id {
					t.Fatalf("member %s bound to %s and %s", m, other, id)
				}
			}
			memberOf[id] = l.ClusterName
			if code, body, _ := api(t, http.MethodDelete, "/v1/leases/"+id, s.token, nil); code != http.StatusNoContent {
				t.Fatalf("DELETE %s: %d %s", id, code, body)
			}
			released[id] = true
		}
		if len(released) < callers {
			return fmt.Errorf("%d of %d leases bound and released", len(released), callers)
		}
		return nil
	})

	// The member side agrees: no instance ever carried two leases (leaseRef
	// is write-once), and every lease's member pointed back at it.
	var insts kobev1.ClusterInstanceList
	if err := s.env.Client.List(t.Context(), &insts, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for _, inst := range insts.Items {
		if inst.Spec.LeaseRef != nil && memberOf[inst.Spec.LeaseRef.Name] != "" && memberOf[inst.Spec.LeaseRef.Name] != inst.Name {
			t.Errorf("instance %s points at lease %s, which says it holds %s", inst.Name, inst.Spec.LeaseRef.Name, memberOf[inst.Spec.LeaseRef.Name])
		}
	}
}

// TestBadRequests: each bad request gets its status code and a JSON error,
// and creates nothing.
func TestBadRequests(t *testing.T) {
	waitPoolReady(t, devPool, 1)
	// A lease at its extension limit, for the last case.
	code, body, _ := api(t, http.MethodPost, "/v1/leases", s.token, strings.NewReader(`{"pool":"dev","ttl":"5m"}`))
	if code != http.StatusCreated {
		t.Fatalf("creating a lease: %d %s", code, body)
	}
	limited := decodeLease(t, body)
	defer api(t, http.MethodDelete, "/v1/leases/"+limited.ID, s.token, nil)
	for range 2 {
		if code, body, _ := api(t, http.MethodPatch, "/v1/leases/"+limited.ID, s.token, strings.NewReader(`{"extend_ttl":"1m"}`)); code != http.StatusOK {
			t.Fatalf("extending: %d %s", code, body)
		}
	}
	var before kobev1.ClusterLeaseList
	if err := s.env.Client.List(t.Context(), &before, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, method, path, token, body string
		wantCode                        int
		wantError                       string
	}{
		{"unknown pool", "POST", "/v1/leases", s.token, `{"pool":"nope","ttl":"5m"}`, 404, "pool not found"},
		{"malformed ttl", "POST", "/v1/leases", s.token, `{"pool":"dev","ttl":"five minutes"}`, 400, "not a duration"},
		{"zero ttl", "POST", "/v1/leases", s.token, `{"pool":"dev","ttl":"0s"}`, 400, "greater than zero"},
		{"negative ttl", "POST", "/v1/leases", s.token, `{"pool":"dev","ttl":"-5m"}`, 400, "greater than zero"},
		{"malformed JSON", "POST", "/v1/leases", s.token, `{"pool":`, 400, "not valid JSON"},
		{"unknown field", "POST", "/v1/leases", s.token, `{"pool":"dev","tll":"5m"}`, 400, "tll"},
		{"missing pool", "POST", "/v1/leases", s.token, `{"ttl":"5m"}`, 400, "pool is required"},
		{"oversize body", "POST", "/v1/leases", s.token, `{"pool":"dev","ttl":"` + strings.Repeat("9", 70<<10) + `"}`, 413, "too large"},
		{"missing token", "POST", "/v1/leases", "", `{"pool":"dev"}`, 401, "missing credentials"},
		{"wrong token", "POST", "/v1/leases", "not-the-token", `{"pool":"dev"}`, 401, "invalid credentials"},
		{"unknown lease", "GET", "/v1/leases/lease-000000000000", s.token, ``, 404, "lease not found"},
		{"extend past the limit", "PATCH", "/v1/leases/" + limited.ID, s.token, `{"extend_ttl":"1m"}`, 409, "extension limit reached"},
		{"malformed extension", "PATCH", "/v1/leases/" + limited.ID, s.token, `{"extend_ttl":"soon"}`, 400, "not a duration"},
		{"wrong method", "PUT", "/v1/leases", s.token, `{}`, 405, "method not allowed"},
		{"unknown pool detail", "GET", "/v1/pools/nope", s.token, ``, 404, "pool not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rd *strings.Reader
			if tt.body != "" {
				rd = strings.NewReader(tt.body)
			}
			var code int
			var body []byte
			if rd != nil {
				code, body, _ = api(t, tt.method, tt.path, tt.token, rd)
			} else {
				code, body, _ = api(t, tt.method, tt.path, tt.token, nil)
			}
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", code, tt.wantCode, body)
			}
			var e wire.ErrorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Message == "" {
				t.Fatalf("body is not a JSON error: %s", body)
			}
			if !strings.Contains(e.Message+" "+e.Detail, tt.wantError) {
				t.Errorf("error %q / %q does not mention %q", e.Message, e.Detail, tt.wantError)
			}
		})
	}
	// DELETE is idempotent for the owner and tells nobody whether a lease
	// they do not hold exists: an unknown id answers 204 like a release.
	t.Run("release unknown lease", func(t *testing.T) {
		code, body, _ := api(t, http.MethodDelete, "/v1/leases/lease-000000000000", s.token, nil)
		if code != http.StatusNoContent || len(body) != 0 {
			t.Fatalf("status %d with %q, want 204 and no body", code, body)
		}
	})
	var after kobev1.ClusterLeaseList
	if err := s.env.Client.List(t.Context(), &after, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) {
		t.Errorf("bad requests created leases: %d before, %d after", len(before.Items), len(after.Items))
	}
}
