package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// watchCacheSync returns a flag that turns true once the manager's caches
// have finished their first sync. Probes read the flag and never wait: the
// cache's own WaitForCacheSync blocks until the sync is done (for ever when
// an informer cannot list), which made /readyz hang instead of failing.
func watchCacheSync(ctx context.Context, c cache.Cache) *atomic.Bool {
	var synced atomic.Bool
	go func() {
		if c.WaitForCacheSync(ctx) {
			synced.Store(true)
		}
	}()
	return &synced
}

// addProbeServer serves /healthz (200 while the process runs) and /readyz
// (503 until ready() says the caches have synced, then 200) on addr; "0"
// serves nothing. It replaces controller-runtime's probe server, whose
// failed checks answer 500, and like it starts before the caches, so that a
// probe answers at once from the process's first moments.
func addProbeServer(mgr ctrl.Manager, addr string, ready func() bool) error {
	if addr == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on --health-probe-bind-address %s: %w", addr, err)
	}
	// A manager.Server runs in the manager's first group, before the
	// caches start, on every replica.
	return mgr.Add(&manager.Server{
		Name:            "health probes",
		Server:          &http.Server{Handler: probeHandler(ready), ReadHeaderTimeout: 5 * time.Second},
		Listener:        ln,
		ShutdownTimeout: ptr.To(5 * time.Second),
	})
}

// probeHandler serves /healthz and /livez (the same: 200 while the process
// runs) and /readyz; ready must not block.
func probeHandler(ready func() bool) http.Handler {
	mux := http.NewServeMux()
	alive := func(w http.ResponseWriter, _ *http.Request) { writeProbe(w, http.StatusOK, "ok") }
	mux.HandleFunc("GET /healthz", alive)
	mux.HandleFunc("GET /livez", alive)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			writeProbe(w, http.StatusServiceUnavailable, "caches not synced")
			return
		}
		writeProbe(w, http.StatusOK, "ok")
	})
	return mux
}

func writeProbe(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body + "\n"))
}
