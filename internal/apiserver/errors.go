package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeText(w http.ResponseWriter, code int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(s))
}

func writeError(w http.ResponseWriter, code int, msg, detail string) {
	writeJSON(w, code, wire.ErrorBody{Message: msg, Detail: detail})
}

// writeAuthError maps authentication and authorisation failures to 401/403
// with a detail that never echoes the credential.
func writeAuthError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, auth.ErrNoCredentials):
		w.Header().Set("WWW-Authenticate", `Bearer realm="kobe"`)
		writeError(w, http.StatusUnauthorized, "missing credentials", "send Authorization: Bearer <token> or an SSH signature; see GET /v1/status for the accepted methods")
	case errors.Is(err, auth.ErrNoMatchingRule):
		writeError(w, http.StatusForbidden, "not authorised", detailOf(err, auth.ErrNoMatchingRule))
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="kobe"`)
		writeError(w, http.StatusUnauthorized, "invalid credentials", detailOf(err, auth.ErrInvalidCredentials))
	}
}

// detailOf is err's text without the sentinel's own words, which the
// "error" field already says.
func detailOf(err, sentinel error) string {
	return strings.TrimPrefix(err.Error(), sentinel.Error()+": ")
}

// jsonMuxErrors turns the mux's own plain-text 404 and 405 answers (no
// route, wrong method) into the API's JSON error. Handlers never write a
// 404 or 405 as text, so only the mux's are caught.
func jsonMuxErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&muxErrorWriter{ResponseWriter: w, r: r}, r)
	})
}

type muxErrorWriter struct {
	http.ResponseWriter
	r          *http.Request
	suppressed bool
}

func (m *muxErrorWriter) WriteHeader(code int) {
	plain := strings.HasPrefix(m.Header().Get("Content-Type"), "text/plain")
	if !m.suppressed && plain && (code == http.StatusMethodNotAllowed || code == http.StatusNotFound) {
		m.suppressed = true
		m.Header().Del("X-Content-Type-Options")
		if code == http.StatusNotFound {
			writeError(m.ResponseWriter, code, "not found", fmt.Sprintf("no route %s %s; see GET /v1/status", m.r.Method, m.r.URL.Path))
			return
		}
		writeError(m.ResponseWriter, code, "method not allowed", fmt.Sprintf("%s is not allowed on %s; allowed: %s", m.r.Method, m.r.URL.Path, m.Header().Get("Allow")))
		return
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *muxErrorWriter) Write(b []byte) (int, error) {
	if m.suppressed {
		return len(b), nil
	}
	return m.ResponseWriter.Write(b)
}

// recoverPanics answers 500 instead of dropping the connection, and logs the
// panic once.
func recoverPanics(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(v)
				}
				log.Error(fmt.Errorf("%v", v), "Panic serving request", "method", r.Method, "path", r.URL.Path)
				writeError(w, http.StatusInternalServerError, "internal error", "the server failed to handle the request; it has been logged")
			}
		}()
		next.ServeHTTP(w, r)
	})
}
