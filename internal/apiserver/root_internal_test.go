package apiserver

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestRootKubernetesPathsGoToTheProxy: the Kubernetes API's paths at the
// root of kobe's endpoint (for clients that drop a kubeconfig server's
// /connect/<lease>) are the connect proxy's, which refuses a caller
// without a lease's certificate with its Status, bearer token or not; they
// never fall through to the lease API. kobe's own routes, and the paths it
// keeps for itself, stay kobe's.
func TestRootKubernetesPathsGoToTheProxy(t *testing.T) {
	s := newIdleServer(t, Options{Log: logr.Discard()})
	serve := func(path string, tlsState *tls.ConnectionState, header http.Header) (*httptest.ResponseRecorder, map[string]any) {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.TLS = tlsState
		for k, v := range header {
			r.Header[k] = v
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		var body map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return rec, body
	}
	noCert := &tls.ConnectionState{}
	for _, path := range []string{"/api", "/api/", "/api/v1/namespaces", "/apis", "/apis/apps/v1", "/version", "/openapi/v2",
		"/openapi/v3", "/.well-known/openid-configuration", "/openid/v1/jwks"} {
		for name, header := range map[string]http.Header{"no credentials": nil, "kobe's bearer token": {"Authorization": {"Bearer a-kobe-token"}}} {
			rec, body := serve(path, noCert, header)
			if rec.Code != http.StatusUnauthorized || body["kind"] != "Status" || body["reason"] != wire.ReasonUnauthorized {
				t.Errorf("GET %s over TLS, no certificate, %s: %d %s, want the connect proxy's 401 Status", path, name, rec.Code, rec.Body)
			}
		}
		rec, body := serve(path, nil, nil)
		if rec.Code != http.StatusServiceUnavailable || body["kind"] != "Status" || body["reason"] != wire.ReasonProxyNotConfigured {
			t.Errorf("GET %s without TLS: %d %s, want the connect proxy's 503 Status", path, rec.Code, rec.Body)
		}
	}
	for _, path := range []string{"/apiary", "/metrics", "/logs/", "/debug/pprof/", "/%61pi/v1", "/v1/nothing"} {
		rec, body := serve(path, noCert, nil)
		if rec.Code != http.StatusNotFound || body["kind"] != nil || body["reason"] != wire.ReasonNotFound {
			t.Errorf("GET %s: %d %s, want kobe's JSON 404", path, rec.Code, rec.Body)
		}
	}
	for _, path := range []string{"/healthz", "/livez"} {
		if rec, _ := serve(path, noCert, nil); rec.Code != http.StatusOK || rec.Body.String() != "ok" {
			t.Errorf("GET %s: %d %s, want kobe's ok", path, rec.Code, rec.Body)
		}
	}
}

// TestLoginDiscovery: GET /.well-known/kunobi-auth answers the configured
// login to a caller without credentials, a JSON 404 in the API's error
// format when none is configured, and a JSON 405 to other methods.
func TestLoginDiscovery(t *testing.T) {
	serve := func(s *Server, method string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(method, wire.LoginDiscoveryPath, nil))
		return rec
	}
	var e wire.ErrorBody
	rec := serve(newIdleServer(t, Options{Log: logr.Discard()}), http.MethodGet)
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusNotFound || e.Reason != wire.ReasonLoginNotConfigured || e.Detail == "" {
		t.Errorf("without a login: %d %s, want a JSON 404 LoginNotConfigured", rec.Code, rec.Body)
	}
	login := &wire.LoginDiscovery{Issuer: "https://idp.example.com", ClientID: "kobe-cli", Scopes: []string{"openid", "email"}}
	s := newIdleServer(t, Options{Log: logr.Discard(), Login: login})
	rec = serve(s, http.MethodGet)
	var got wire.LoginDiscovery
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || got.Issuer != login.Issuer || got.ClientID != login.ClientID || len(got.Scopes) != 2 ||
		rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("with a login: %d %s", rec.Code, rec.Body)
	}
	if !strings.Contains(rec.Body.String(), `"client_id":"kobe-cli"`) {
		t.Errorf("discovery must use the API's snake_case names: %s", rec.Body)
	}
	rec = serve(s, http.MethodPost)
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != http.StatusMethodNotAllowed || e.Reason != wire.ReasonMethodNotAllowed {
		t.Errorf("POST: %d %s, want a JSON 405", rec.Code, rec.Body)
	}
}
