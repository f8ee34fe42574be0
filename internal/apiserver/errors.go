package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/auth"
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
	writeJSON(w, code, apiclient.Error{Message: msg, Detail: detail})
}

// writeAuthError maps authentication and authorisation failures to 401/403
// with a detail that never echoes the credential.
func writeAuthError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, auth.ErrNoCredentials):
		w.Header().Set("WWW-Authenticate", `Bearer realm="kobe"`)
		writeError(w, http.StatusUnauthorized, "missing credentials", "send Authorization: Bearer <token> or an SSH signature; see GET /v1/status for the accepted methods")
	case errors.Is(err, auth.ErrNoMatchingRule):
		writeError(w, http.StatusForbidden, "not authorised", err.Error())
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="kobe"`)
		writeError(w, http.StatusUnauthorized, "invalid credentials", err.Error())
	}
}

// jsonMethodErrors turns the mux's plain-text 405 into the API's JSON error.
func jsonMethodErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&methodErrorWriter{ResponseWriter: w, r: r}, r)
	})
}

type methodErrorWriter struct {
	http.ResponseWriter
	r          *http.Request
	suppressed bool
}

func (m *methodErrorWriter) WriteHeader(code int) {
	if code == http.StatusMethodNotAllowed && !m.suppressed {
		m.suppressed = true
		allow := m.Header().Get("Allow")
		m.Header().Del("X-Content-Type-Options")
		writeError(m.ResponseWriter, code, "method not allowed", fmt.Sprintf("%s is not allowed on %s; allowed: %s", m.r.Method, m.r.URL.Path, allow))
		return
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *methodErrorWriter) Write(b []byte) (int, error) {
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
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error(fmt.Errorf("%v", v), "Panic serving request", "method", r.Method, "path", r.URL.Path)
				writeError(w, http.StatusInternalServerError, "internal error", "the server failed to handle the request; it has been logged")
			}
		}()
		next.ServeHTTP(w, r)
	})
}
