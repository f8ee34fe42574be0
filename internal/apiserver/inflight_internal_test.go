package apiserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestInFlightLimit: beyond MaxInFlight concurrent API requests the server
// answers 429 with Retry-After and a JSON error, while the infrastructure
// routes stay exempt.
func TestInFlightLimit(t *testing.T) {
	s := newIdleServer(t, Options{MaxInFlight: 2, Log: logr.Discard()})
	release := make(chan struct{})
	var entered sync.WaitGroup
	blocking := s.limitInFlight(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered.Done()
		<-release
		w.WriteHeader(http.StatusNoContent)
	}))

	var done sync.WaitGroup
	for range 2 {
		entered.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			blocking.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/leases", nil))
		}()
	}
	entered.Wait() // both slots are taken

	rec := httptest.NewRecorder()
	blocking.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/leases", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("third request: %d, Retry-After %q; want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	var e wire.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Message != "too many requests" {
		t.Fatalf("body %q is not the JSON error", rec.Body.String())
	}

	for _, path := range []string{"/healthz", "/readyz"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("%s while the API is saturated: %d, want 200 (exempt)", path, rec.Code)
		}
	}

	close(release)
	done.Wait()
	entered.Add(1)
	rec = httptest.NewRecorder()
	blocking.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/leases", nil))
	if rec.Code != http.StatusNoContent {
		t.Errorf("after the slots freed: %d, want the handler's 204", rec.Code)
	}
}
