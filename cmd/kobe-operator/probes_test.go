package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// syncGate is a cache whose first sync ends when its channel is closed.
type syncGate struct {
	cache.Cache
	synced chan struct{}
}

func (g *syncGate) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-g.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

func TestProbesAnswerAtOnceUntilTheCachesSync(t *testing.T) {
	gate := &syncGate{synced: make(chan struct{})}
	synced := watchCacheSync(t.Context(), gate)
	h := probeHandler(synced.Load)
	probe := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	for range 3 {
		if code, body := probe("/readyz"); code != http.StatusServiceUnavailable || body != "caches not synced" {
			t.Fatalf("/readyz before the sync: %d %q, want 503", code, body)
		}
		if code, _ := probe("/livez"); code != http.StatusOK {
			t.Fatalf("/livez before the sync: %d", code)
		}
		if code, _ := probe("/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz before the sync: %d", code)
		}
	}
	close(gate.synced)
	deadline := time.Now().Add(10 * time.Second)
	for !synced.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the flag never turned true after the sync")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, body := probe("/readyz"); code != http.StatusOK || body != "ok" {
		t.Fatalf("/readyz after the sync: %d %q", code, body)
	}
}
