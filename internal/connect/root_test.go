package connect

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func TestRootPath(t *testing.T) {
	for _, tt := range []struct {
		path string
		// root: IsRootPath; code: RootPath's refusal (0: none).
		root bool
		code int
	}{
		{path: "/api", root: true},
		{path: "/api/", root: true},
		{path: "/api/v1/namespaces/default/pods", root: true},
		{path: "/apis", root: true},
		{path: "/apis/apps/v1/deployments", root: true},
		{path: "/version", root: true},
		{path: "/version/", root: true},
		{path: "/openapi/v2", root: true},
		{path: "/openapi/v3/apis/apps/v1", root: true},
		{path: "/.well-known/openid-configuration", root: true},
		{path: "/openid/v1/jwks", root: true},
		{path: "/api/v1/namespaces/a%20b", root: true},
		{path: "/api/../v1/leases", root: true, code: http.StatusBadRequest},
		{path: "/api/%2e%2e/connect/lease-b/api", root: true, code: http.StatusBadRequest},
		{path: "/apis/..%2Fconnect%2Flease-b", root: true, code: http.StatusBadRequest},
		{path: "/api//v1", root: true, code: http.StatusBadRequest},
		{path: "/api/./v1", root: true, code: http.StatusBadRequest},
		{path: "/api/v1%5C..%5C", root: true, code: http.StatusBadRequest},
		{path: "/api/%zz", root: true, code: http.StatusBadRequest},
		// kobe's own routes, and paths it keeps for itself.
		{path: "/", code: http.StatusNotFound},
		{path: "/v1/leases", code: http.StatusNotFound},
		{path: "/v1/status", code: http.StatusNotFound},
		{path: "/healthz", code: http.StatusNotFound},
		{path: "/readyz", code: http.StatusNotFound},
		{path: "/livez", code: http.StatusNotFound},
		{path: "/metrics", code: http.StatusNotFound},
		{path: "/logs/", code: http.StatusNotFound},
		{path: "/debug/pprof/", code: http.StatusNotFound},
		// Segments, not prefixes; the escaped form decides.
		{path: "/apiary", code: http.StatusNotFound},
		{path: "/apis-x/v1", code: http.StatusNotFound},
		{path: "/versions", code: http.StatusNotFound},
		{path: "/API/v1", code: http.StatusNotFound},
		{path: "/%61pi/v1", code: http.StatusNotFound},
		{path: "/api%2Fv1", code: http.StatusNotFound},
		{path: "//api", code: http.StatusNotFound},
	} {
		t.Run(tt.path, func(t *testing.T) {
			if got := IsRootPath(tt.path); got != tt.root {
				t.Errorf("IsRootPath(%q) = %v, want %v", tt.path, got, tt.root)
			}
			rest, r := RootPath(tt.path)
			switch {
			case tt.code != 0 && (r == nil || r.Code != tt.code):
				t.Errorf("RootPath(%q) = %q %v, want a %d refusal", tt.path, rest, r, tt.code)
			case tt.code == 0 && (r != nil || rest != tt.path):
				t.Errorf("RootPath(%q) = %q %v, want the path itself", tt.path, rest, r)
			}
		})
	}
}

// TestServes: the proxy answers connect paths (plain or escaped) and the
// Kubernetes API's paths at the root, and nothing of kobe's own.
func TestServes(t *testing.T) {
	for path, want := range map[string]bool{
		"/connect/lease-a/api": true, "/connect/": true, "/%63onnect/lease-a/api": true, "/api": true, "/apis/apps/v1": true,
		"/version": true, "/openapi/v3": true, "/v1/leases": false, "/v1/status": false, "/healthz": false, "/readyz": false,
		"/livez": false, "/metrics": false, "/": false, "/apiary": false, "/%61pi": false,
	} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if got := Serves(r); got != want {
			t.Errorf("Serves(%s) = %v, want %v", path, got, want)
		}
	}
}

// send sends a request for path (raw, as the client writes it) to the
// harness's proxy, presenting cert (nil: none).
func (h *harness) send(t *testing.T, ctx context.Context, cert *tls.Certificate, method, path string, header http.Header) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, h.front.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if host := header.Get("Host"); host != "" {
		req.Host = host
	}
	tr := h.front.Client().Transport.(*http.Transport).Clone()
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	return (&http.Client{Transport: tr}).Do(req)
}

// sendRead is send, with the response's status and body read.
func (h *harness) sendRead(t *testing.T, cert *tls.Certificate, path string, header http.Header) (int, []byte) {
	t.Helper()
	resp, err := h.send(t, t.Context(), cert, http.MethodGet, path, header)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// requireStatus checks a refusal: code, and a body that is both a
// Kubernetes Status with reason and one of kobe's JSON errors.
func requireStatus(t *testing.T, what string, code int, body []byte, wantCode int, wantReason string) {
	t.Helper()
	var st struct {
		Kind, Status, Reason, Message, Error string
		Code                                 int
	}
	if code != wantCode || json.Unmarshal(body, &st) != nil || st.Kind != "Status" || st.Status != "Failure" ||
		st.Reason != wantReason || st.Code != wantCode || st.Message == "" || st.Error == "" {
		t.Errorf("%s: %d %s, want a %d Status with reason %s", what, code, body, wantCode, wantReason)
	}
}

// cert issues a client certificate of cn from ca, valid as the harness's.
func cert(t *testing.T, ca *pki.CA, cn string) *tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.IssueClient(cn, []string{leasecreds.AdminGroup}, now.Add(-9*time.Minute), now.Add(20*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestRootPathsReachTheCertificatesLease: a Kubernetes API path at the
// root reaches the member of the lease whose certificate the caller
// presents, at that path and query, as that lease, with kobe's admin
// credential; the other lease's member sees nothing. The audit line says
// the request came at the root.
func TestRootPathsReachTheCertificatesLease(t *testing.T) {
	h := newHarness(t, Options{}, "a", "b")
	for _, x := range []string{"lease-a", "lease-b"} {
		other := map[string]string{"lease-a": "lease-b", "lease-b": "lease-a"}[x]
		c := h.certs[x]
		for _, path := range []string{
			"/api", "/api/", "/api/v1/namespaces/default/configmaps", "/apis", "/apis/apps/v1/namespaces/a%20b/deployments",
			"/version", "/openapi/v2", "/openapi/v3/apis/apps/v1?hash=abc", "/.well-known/openid-configuration", "/openid/v1/jwks",
		} {
			testCase := x + " " + path
			code, body := h.sendRead(t, &c, path, http.Header{"X-Test-Case": {testCase}})
			if code != http.StatusCreated {
				t.Errorf("GET %s with %s's certificate: %d %s, want the member's 201", path, x, code, body)
				continue
			}
			m := h.members[x]
			wantPath, _, _ := strings.Cut(path, "?")
			if got := m.path(testCase); got != wantPath {
				t.Errorf("GET %s with %s's certificate reached its member at %q", path, x, got)
			}
			seen := m.headers(t, testCase)
			if got := seen.Values("Impersonate-User"); len(got) != 1 || got[0] != leasecreds.CommonName(h.leases[x]) {
				t.Errorf("GET %s with %s's certificate: the member saw Impersonate-User %q", path, x, got)
			}
			if got := seen.Get("Authorization"); got != "Bearer "+adminToken {
				t.Errorf("GET %s: the member saw Authorization %q, want the admin kubeconfig's token", path, got)
			}
			if h.members[other].saw(testCase) {
				t.Errorf("GET %s with %s's certificate reached %s's member", path, x, other)
			}
		}
	}
	testenv.Eventually(t, 5*time.Second, "an audit line of a root request", func() error {
		for _, m := range h.logLines("Connect audit") {
			if m["route"] == "root" && m["lease"] == "lease-b" && m["path"] == "/openapi/v3/apis/apps/v1" && m["member"] == "m-b" {
				return nil
			}
		}
		return fmt.Errorf("no Connect audit line with route root for lease-b's /openapi/v3/apis/apps/v1")
	})
	for _, m := range h.logLines("Connect audit") {
		if m["route"] != "root" {
			t.Errorf("audit line %v: route %v, want root", m, m["route"])
		}
	}
}

// TestRootOnlyTheCertificatesLease: at the root, lease A's certificate
// reaches A's member and nothing else, whatever the request says about B;
// no certificate, a certificate that is not a lease's, or one that is
// not the lease's it names, gets the connect proxy's Status refusal and
// reaches no member; so does an ended or unknown lease's.
func TestRootOnlyTheCertificatesLease(t *testing.T) {
	h := newHarness(t, Options{}, "a", "b")
	a, b := h.leases["lease-a"], h.leases["lease-b"]
	certA := h.certs["lease-a"]
	nobody := func(t *testing.T, testCase string) {
		t.Helper()
		for x, m := range h.members {
			if m.saw(testCase) {
				t.Errorf("%s reached %s's member", testCase, x)
			}
		}
	}

	t.Run("B named in the request", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			path   string
			header http.Header
		}{
			{"Impersonate-User", "/api", http.Header{"Impersonate-User": {leasecreds.CommonName(b)}, "Impersonate-Group": {"system:masters"}}},
			{"lease headers", "/api", http.Header{"X-Kobe-Lease": {b.Name}, "Kobe-Lease": {b.Name}, "X-Forwarded-Prefix": {"/connect/" + b.Name}}},
			{"Host", "/api", http.Header{"Host": {b.Name}}},
			{"Authorization", "/api", http.Header{"Authorization": {"Bearer " + b.Name}}},
			{"query", "/api?lease=" + b.Name, nil},
			{"a path under /api naming B", "/api/v1/namespaces/" + b.Name, nil},
		} {
			testCase := "B in " + c.name
			if c.header == nil {
				c.header = http.Header{}
			}
			c.header.Set("X-Test-Case", testCase)
			code, body := h.sendRead(t, &certA, c.path, c.header)
			if code != http.StatusCreated {
				t.Errorf("%s: %d %s, want A's member's 201", testCase, code, body)
				continue
			}
			if got := h.members["lease-a"].headers(t, testCase).Values("Impersonate-User"); len(got) != 1 || got[0] != leasecreds.CommonName(a) {
				t.Errorf("%s: A's member saw Impersonate-User %q, want only A", testCase, got)
			}
			if h.members["lease-b"].saw(testCase) {
				t.Errorf("%s reached B's member", testCase)
			}
		}
	})

	t.Run("B's connect path with A's certificate", func(t *testing.T) {
		for _, c := range []struct {
			path string
			code int
		}{
			{"/connect/" + b.Name + "/api", http.StatusForbidden},
			{"/connect/" + b.Name + "/", http.StatusForbidden},
			{"/connect/" + a.Name + "/../" + b.Name + "/api", http.StatusBadRequest},
			{"/api/../connect/" + b.Name + "/api", http.StatusBadRequest},
			{"/api/%2e%2e/connect/" + b.Name + "/api", http.StatusBadRequest},
			{"/apis/..%2Fconnect%2F" + b.Name + "%2Fapi", http.StatusBadRequest},
		} {
			testCase := "path " + c.path
			code, body := h.sendRead(t, &certA, c.path, http.Header{"X-Test-Case": {testCase}})
			reason := map[int]string{http.StatusForbidden: wire.ReasonForbidden, http.StatusBadRequest: wire.ReasonBadRequest}[c.code]
			requireStatus(t, c.path+" with A's certificate", code, body, c.code, reason)
			nobody(t, testCase)
		}
	})

	t.Run("certificates", func(t *testing.T) {
		other, err := pki.NewCA("someone-else", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		caA, caB := h.cas["lease-a"], h.cas["lease-b"]
		for _, c := range []struct {
			name   string
			cert   *tls.Certificate
			code   int
			reason string
		}{
			{"no certificate", nil, http.StatusUnauthorized, wire.ReasonUnauthorized},
			{"B's name signed by A's member's CA", cert(t, caA, leasecreds.CommonName(b)), http.StatusForbidden, wire.ReasonForbidden},
			{"A's name signed by B's member's CA", cert(t, caB, leasecreds.CommonName(a)), http.StatusForbidden, wire.ReasonForbidden},
			{"A's name signed by another CA", cert(t, other, leasecreds.CommonName(a)), http.StatusForbidden, wire.ReasonForbidden},
			{"A's name without its requester", cert(t, caA, "kobe-lease:"+a.Name), http.StatusForbidden, wire.ReasonForbidden},
			{"A's name with another requester", cert(t, caA, "kobe-lease:"+a.Name+":ci-b"), http.StatusForbidden, wire.ReasonForbidden},
			{"A's name, upper case", cert(t, caA, strings.ToUpper(leasecreds.CommonName(a))), http.StatusForbidden, wire.ReasonForbidden},
			{"a member's admin", cert(t, caA, "kubernetes-admin"), http.StatusForbidden, wire.ReasonForbidden},
			{"a node", cert(t, caA, "system:node:n1"), http.StatusForbidden, wire.ReasonForbidden},
			{"a lease that does not exist", cert(t, caA, "kobe-lease:lease-000000000000:ci-a"), http.StatusNotFound, wire.ReasonLeaseNotFound},
		} {
			for _, path := range []string{"/api", "/apis/apps/v1", "/version"} {
				testCase := c.name + " " + path
				code, body := h.sendRead(t, c.cert, path, http.Header{"X-Test-Case": {testCase}})
				requireStatus(t, testCase, code, body, c.code, c.reason)
				nobody(t, testCase)
			}
		}
	})

	t.Run("ended or unknown lease", func(t *testing.T) {
		ended := a.DeepCopy()
		if err := h.objects.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: a.Name}, ended); err != nil {
			t.Fatal(err)
		}
		ended.Status.Phase = kobev1.LeaseReleased
		if err := h.objects.Update(t.Context(), ended); err != nil {
			t.Fatal(err)
		}
		if err := h.objects.Delete(t.Context(), b.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name   string
			cert   tls.Certificate
			code   int
			reason string
		}{
			{"released lease A", certA, http.StatusGone, wire.ReasonLeaseEnded},
			{"deleted lease B", h.certs["lease-b"], http.StatusNotFound, wire.ReasonLeaseNotFound},
		} {
			for _, path := range []string{"/api", "/apis", "/version"} {
				testCase := c.name + " " + path
				code, body := h.sendRead(t, &c.cert, path, http.Header{"X-Test-Case": {testCase}})
				requireStatus(t, testCase, code, body, c.code, c.reason)
				nobody(t, testCase)
			}
		}
	})
}

// watch opens a watch at path with cert and returns its status, its body
// (refusals) and a channel closed when the watch's response ends.
func (h *harness) watch(t *testing.T, cert tls.Certificate, path string) (int, string, chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	resp, err := h.send(t, ctx, &cert, http.MethodGet, path, nil)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	ended := make(chan struct{})
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		close(ended)
		return resp.StatusCode, string(b), ended
	}
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		close(ended)
	}()
	return resp.StatusCode, "", ended
}

// TestRootStreams: requests at the root count against their lease's cap
// together with its /connect/<lease> requests, and are closed when the
// lease ends, like those.
func TestRootStreams(t *testing.T) {
	const limit = 2
	h := newHarness(t, Options{MaxStreamsPerLease: limit}, "a", "b")
	const rootWatch, connectWatch = "/api/v1/namespaces/default/configmaps?watch=1", "/connect/lease-a/api/v1/namespaces/default/configmaps?watch=1"
	certA, certB := h.certs["lease-a"], h.certs["lease-b"]
	code, body, rootEnded := h.watch(t, certA, rootWatch)
	if code != http.StatusOK {
		t.Fatalf("lease-a's watch at the root: %d %s", code, body)
	}
	if code, body, _ := h.watch(t, certA, connectWatch); code != http.StatusOK {
		t.Fatalf("lease-a's watch under /connect: %d %s", code, body)
	}
	for _, path := range []string{rootWatch, connectWatch} {
		code, body, _ := h.watch(t, certA, path)
		requireStatus(t, "lease-a's third watch, "+path, code, []byte(body), http.StatusTooManyRequests, wire.ReasonTooManyRequests)
	}
	code, body, otherEnded := h.watch(t, certB, rootWatch)
	if code != http.StatusOK {
		t.Fatalf("lease-b's watch at the root while lease-a is at its cap: %d %s", code, body)
	}

	h.proxy.closeLease(h.leases["lease-a"], "released")
	select {
	case <-rootEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("lease-a's watch at the root is open 5 s after its lease ended")
	}
	select {
	case <-otherEnded:
		t.Fatal("lease-b's watch ended with lease-a")
	case <-time.After(100 * time.Millisecond):
	}
}
