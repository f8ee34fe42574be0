package apiserver

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
