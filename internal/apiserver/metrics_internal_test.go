package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestNoMetricsOnTheAPIPort: the lease API's port may be exposed, and the
// metrics name pools a caller may not see, so an anonymous GET /metrics
// there is the JSON 404 of any unknown route and carries no kobe_ series.
func TestNoMetricsOnTheAPIPort(t *testing.T) {
	metrics.LeaseRequest("secret-pool", "refused") // a series a leak would show
	s := newIdleServer(t, Options{Log: logr.Discard()})
	for _, path := range []string{"/metrics", "/metrics/"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body := rec.Body.String()
		if strings.Contains(body, "kobe_") || strings.Contains(body, "secret-pool") {
			t.Errorf("GET %s without credentials shows metrics (HTTP %d)", path, rec.Code)
		}
		if rec.Code != http.StatusNotFound || !strings.Contains(body, wire.ReasonNotFound) {
			t.Errorf("GET %s without credentials: HTTP %d %.200q, want the JSON 404", path, rec.Code, body)
		}
	}
}
