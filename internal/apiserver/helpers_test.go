//go:build integration

package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// tokenOf is the bearer token of token policy name.
func tokenOf(name string) apiclient.BearerToken {
	return apiclient.BearerToken(name + "-s3cret-token")
}

// response is one answer of the API.
type response struct {
	code   int
	header http.Header
	body   []byte
}

func (r response) String() string {
	return fmt.Sprintf("HTTP %d %s", r.code, strings.TrimSpace(string(r.body)))
}

// call sends method path to the API with body (JSON-encoded unless it is
// already []byte, none when nil), authenticated by creds exactly as
// apiclient does (nil: no credentials).
func call(t *testing.T, creds apiclient.Credentials, method, path string, body any) response {
	t.Helper()
	return send(t, prepare(t, creds, method, path, body))
}

// prepare builds the request call sends, without sending it.
func prepare(t *testing.T, creds apiclient.Credentials, method, path string, body any) *http.Request {
	t.Helper()
	req, raw := newRequest(t, method, path, body)
	if creds != nil {
		if err := creds.Apply(req, raw); err != nil {
			t.Fatalf("applying credentials to %s %s: %v", method, path, err)
		}
	}
	return req
}

// newRequest builds a request to the API and returns it with its body bytes.
func newRequest(t *testing.T, method, path string, body any) (*http.Request, []byte) {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, fx.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, raw
}

// send sends req as it is and reads the answer.
func send(t *testing.T, req *http.Request) response {
	t.Helper()
	r, err := roundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// roundTrip sends req (again, when it was sent before: replay tests) and
// reads the answer. Unlike send it may run on any goroutine.
func roundTrip(req *http.Request) (response, error) {
	if req.GetBody != nil { // set by http.NewRequest for a bytes.Reader body
		b, err := req.GetBody()
		if err != nil {
			return response{}, err
		}
		req.Body = b
	}
	resp, err := fx.http.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading answer: %w", req.Method, req.URL.Path, err)
	}
	return response{code: resp.StatusCode, header: resp.Header, body: body}, nil
}

// decode decodes a successful answer of status code into T.
func decode[T any](t *testing.T, r response, code int) T {
	t.Helper()
	var out T
	if r.code != code {
		t.Fatalf("got %s; want %d", r, code)
	}
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("decoding %s: %v", r, err)
	}
	return out
}

// requireError checks an error answer: the status, a JSON
// {"error", "detail", "reason"} body with the given error, a detail that
// contains detail and some reason (see requireReason).
func requireError(t *testing.T, r response, code int, errText, detail string) wire.ErrorBody {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %s; want %d %q", r, code, errText)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error answer has Content-Type %q, want JSON: %s", ct, r)
	}
	var e wire.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error answer is not JSON: %s", r)
	}
	if e.Message != errText || e.Detail == "" || !strings.Contains(e.Detail, detail) {
		t.Fatalf("got error %q detail %q; want %q with a detail containing %q", e.Message, e.Detail, errText, detail)
	}
	if e.Reason == "" {
		t.Fatalf("error answer without a reason: %s", r)
	}
	return e
}

// requireReason fails unless the error answer e carries reason.
func requireReason(t *testing.T, e wire.ErrorBody, reason string) {
	t.Helper()
	if e.Reason != reason {
		t.Fatalf("error %q has reason %q, want %q", e.Message, e.Reason, reason)
	}
}

// createLease leases from pool with ttl ("" for the pool's default) and
// requires a 201 Bound lease with a kubeconfig.
func createLease(t *testing.T, creds apiclient.Credentials, pool, ttl string) wire.Lease {
	t.Helper()
	r := call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool, TTL: ttl})
	l := decode[wire.Lease](t, r, http.StatusCreated)
	if l.Phase != wire.PhaseBound || l.Kubeconfig == "" || l.ClusterName == "" || l.Pool != pool {
		t.Fatalf("not a lease of %s bound with a kubeconfig: %s", pool, r)
	}
	recordedLease(t, l.ID)
	return l
}

// recordedLease waits for a lease answered Bound to record its bind (the
// status copy is written after the answer) and returns it.
func recordedLease(t *testing.T, id string) *kobev1.ClusterLease {
	t.Helper()
	var obj *kobev1.ClusterLease
	testenv.Eventually(t, 10*time.Second, "lease "+id+" to record its bind", func() error {
		if obj = leaseObject(t, id); obj.Status.Phase != kobev1.LeaseBound || obj.Status.InstanceRef == nil {
			return fmt.Errorf("phase %q, instance %+v", obj.Status.Phase, obj.Status.InstanceRef)
		}
		return nil
	})
	return obj
}

// leaseObjects lists every ClusterLease of the namespace from the API
// server (not a cache).
func leaseObjects(t *testing.T) []kobev1.ClusterLease {
	t.Helper()
	var ls kobev1.ClusterLeaseList
	if err := fx.env.Client.List(t.Context(), &ls, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return ls.Items
}

// leasesOf lists the ClusterLeases whose requester is identity.
func leasesOf(t *testing.T, identity string) []kobev1.ClusterLease {
	t.Helper()
	var out []kobev1.ClusterLease
	for _, l := range leaseObjects(t) {
		if l.Spec.Requester.Identity == identity {
			out = append(out, l)
		}
	}
	return out
}

// leaseObject reads one ClusterLease from the API server.
func leaseObject(t *testing.T, name string) *kobev1.ClusterLease {
	t.Helper()
	l := &kobev1.ClusterLease{}
	if err := fx.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		t.Fatalf("reading lease %s: %v", name, err)
	}
	return l
}

// leaseNames are the names of ls, sorted.
func leaseNames(ls []kobev1.ClusterLease) []string {
	out := make([]string, len(ls))
	for i := range ls {
		out[i] = ls[i].Name
	}
	slices.Sort(out)
	return out
}

// requireNoNewLease fails when the namespace holds a ClusterLease that was
// not in before: a refused request must not leave a lease behind.
func requireNoNewLease(t *testing.T, before []kobev1.ClusterLease) {
	t.Helper()
	if got, want := leaseNames(leaseObjects(t)), leaseNames(before); !slices.Equal(got, want) {
		t.Fatalf("a refused request changed the leases: before %v, after %v", want, got)
	}
}

// requireBoundUntouched fails unless lease name is still Bound, with the
// same expiry and extensions as want.
func requireBoundUntouched(t *testing.T, name string, want *kobev1.ClusterLease) {
	t.Helper()
	l := leaseObject(t, name)
	switch {
	case l.Status.Phase != kobev1.LeaseBound || lease.IsEnded(l.Status.Phase) || l.Status.EndedAt != nil:
		t.Fatalf("lease %s is %s, want still Bound", name, l.Status.Phase)
	case !l.Status.ExpiresAt.Equal(want.Status.ExpiresAt) || l.Status.Extensions != want.Status.Extensions:
		t.Fatalf("lease %s changed: expires %v (was %v), extensions %d (was %d)", name,
			l.Status.ExpiresAt, want.Status.ExpiresAt, l.Status.Extensions, want.Status.Extensions)
	}
}

// eventually waits up to 15s for cond (testenv.Eventually); what
// describes the awaited state for the failure message.
func eventually(t *testing.T, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, what, func() error {
		if !cond(t.Context()) {
			return errors.New("not yet")
		}
		return nil
	})
}
