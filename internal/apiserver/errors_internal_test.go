package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestHostAPIBusyIsRetryable: what the host API server answers when it is
// slow or overloaded reaches the caller as a 503 to retry, whatever wraps
// it; any other failure stays a 500 that says nothing of its cause.
func TestHostAPIBusyIsRetryable(t *testing.T) {
	leases := schema.GroupResource{Group: "kobe.kunobi.ninja", Resource: "clusterleases"}
	for _, tc := range []struct {
		name       string
		err        error
		code       int
		reason     string
		retryAfter string
	}{
		{"server timeout", apierrors.NewServerTimeout(leases, "create", 1), http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		{"timeout", apierrors.NewTimeoutError("request did not complete", 1), http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		{"unavailable", apierrors.NewServiceUnavailable("etcd is down"), http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		{"client-side deadline", context.DeadlineExceeded, http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		// What client-go returns while the host API server restarts.
		{"connection refused", &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/apis", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}},
			http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		{"connection reset", &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/apis", Err: &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}},
			http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		{"connection closed mid-answer", &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/apis", Err: io.ErrUnexpectedEOF}, http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "1"},
		{"conflict", apierrors.NewConflict(leases, "lease-1", errors.New("changed")), http.StatusInternalServerError, wire.ReasonInternalError, ""},
		{"forbidden by the host", apierrors.NewForbidden(leases, "lease-1", errors.New("no RBAC")), http.StatusInternalServerError, wire.ReasonInternalError, ""},
		{"anything else", errors.New("boom"), http.StatusInternalServerError, wire.ReasonInternalError, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{Log: logr.Discard()}}
			rec := httptest.NewRecorder()
			s.fail(rec, httptest.NewRequest(http.MethodPost, "/v1/leases", nil), fmt.Errorf("binding lease-1: %w", tc.err))
			var body wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if rec.Code != tc.code || body.Reason != tc.reason || rec.Header().Get("Retry-After") != tc.retryAfter {
				t.Errorf("answered %d %s Retry-After %q, want %d %s %q", rec.Code, body.Reason, rec.Header().Get("Retry-After"), tc.code, tc.reason, tc.retryAfter)
			}
			if body.Message == "" || body.Detail == "" {
				t.Errorf("body %+v: a message and a detail are always there", body)
			}
		})
	}
}
