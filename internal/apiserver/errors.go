package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// errBadRequest is a request the handler could not decode.
var errBadRequest = wire.ErrMalformed

// failure is how the API answers one kind of error.
type failure struct {
	sentinel error
	code     int
	reason   string
	// retryAfter, in seconds, is sent as Retry-After when set.
	retryAfter string
}

// failures maps the errors of decoding and of package leaseservice to
// answers, first match wins; a leaseservice.Refusal carries its own. Any
// other error is a 500.
var failures = []failure{
	{errBadRequest, http.StatusBadRequest, wire.ReasonBadRequest, ""},
	{leaseservice.ErrInvalid, http.StatusBadRequest, wire.ReasonBadRequest, ""},
	{lease.ErrBadExtension, http.StatusBadRequest, wire.ReasonBadRequest, ""},
	{leaseservice.ErrPoolNotAllowed, http.StatusForbidden, wire.ReasonPoolNotAllowed, ""},
	{leaseservice.ErrPoolNotFound, http.StatusNotFound, wire.ReasonPoolNotFound, ""},
	{leaseservice.ErrLeaseNotFound, http.StatusNotFound, wire.ReasonLeaseNotFound, ""},
	{lease.ErrExtensionLimit, http.StatusConflict, wire.ReasonExtensionLimitReached, ""},
	{lease.ErrNotBound, http.StatusConflict, wire.ReasonExtensionRefused, ""},
	{lease.ErrExpired, http.StatusConflict, wire.ReasonExtensionRefused, ""},
	{leaseservice.ErrLeaseEnded, http.StatusGone, wire.ReasonLeaseEnded, ""},
	{leaseservice.ErrNoHeartbeat, http.StatusConflict, wire.ReasonHeartbeatNotEnabled, ""},
	{errBodyTooLarge, http.StatusRequestEntityTooLarge, wire.ReasonBodyTooLarge, ""},
	{errDigestMismatch, http.StatusBadRequest, wire.ReasonDigestMismatch, ""},
	{errNotAnImage, http.StatusBadRequest, wire.ReasonNotAnImageArchive, ""},
	{leaseservice.ErrLeaseNotBound, http.StatusConflict, wire.ReasonLeaseNotBound, ""},
	{leaseservice.ErrNoImages, http.StatusConflict, wire.ReasonImagesUnsupported, ""},
	{leaseservice.ErrImportFailed, http.StatusUnprocessableEntity, wire.ReasonImportFailed, ""},
	{leaseservice.ErrMemberUnavailable, http.StatusServiceUnavailable, wire.ReasonMemberUnavailable, "10"},
	{leaseservice.ErrProxyNotConfigured, http.StatusServiceUnavailable, wire.ReasonProxyNotConfigured, ""},
}

// fail answers err. The error's text after its sentinel is the detail;
// internal errors are logged and never shown.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var refused *leaseservice.Refusal
	if errors.As(err, &refused) {
		if refused.RetryAfter != "" {
			w.Header().Set("Retry-After", refused.RetryAfter)
		}
		writeError(w, refused.Code, refused.Reason, refused.Message, refused.Detail)
		return
	}
	for _, f := range failures {
		if errors.Is(err, f.sentinel) {
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			writeError(w, f.code, f.reason, f.sentinel.Error(), detailOf(err, f.sentinel))
			return
		}
	}
	if hostAPIBusy(err) {
		s.opts.Log.Error(err, "Request failed: the host API server is busy", requestKV(r)...)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, wire.ReasonHostAPIUnavailable, "the host cluster's API server is busy",
			"it did not answer in time or asked kobe to slow down; try again (GET /v1/leases shows whether a lease was recorded)")
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The caller went away: nobody reads the answer, and it is no
		// failure of kobe's to log as one.
		s.opts.Log.V(1).Info("Request abandoned by its caller", append(requestKV(r), "error", err.Error())...)
	} else {
		s.opts.Log.Error(err, "Request failed", requestKV(r)...)
	}
	writeError(w, http.StatusInternalServerError, wire.ReasonInternalError, "internal error", "the request failed; the error has been logged")
}

// hostAPIBusy reports an error of the host cluster's API server that means
// "not now" (a timeout on either side, throttling, unavailable, or not
// answering at all: refused or dropped connections while it restarts)
// rather than a fault of kobe's: the caller may try again, so it is a 503,
// not a 500.
func hostAPIBusy(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || errors.Is(err, context.DeadlineExceeded) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

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

func writeError(w http.ResponseWriter, code int, reason, msg, detail string) {
	writeJSON(w, code, wire.ErrorBody{Message: msg, Detail: detail, Reason: reason})
}

// writeAuthError maps authentication failures to 401, a caller whose
// policy has no rule for it to 403, and credentials that could not be
// checked now (auth.ErrBusy) to 429, with a detail that never echoes the
// credential.
func writeAuthError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, auth.ErrNoCredentials):
		w.Header().Set("WWW-Authenticate", `Bearer realm="kobe"`)
		writeError(w, http.StatusUnauthorized, wire.ReasonUnauthorized, "missing credentials",
			"send Authorization: Bearer <token> or an SSH signature; see GET /v1/status for the accepted methods")
	case errors.Is(err, auth.ErrBusy):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, wire.ReasonTooManyRequests, "too many requests", detailOf(err, auth.ErrBusy))
	case errors.Is(err, auth.ErrNoMatchingRule):
		// No rule, so no pool: the caller may use none.
		writeError(w, http.StatusForbidden, wire.ReasonPoolNotAllowed, "not authorised", detailOf(err, auth.ErrNoMatchingRule))
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="kobe"`)
		writeError(w, http.StatusUnauthorized, wire.ReasonUnauthorized, "invalid credentials", detailOf(err, auth.ErrInvalidCredentials))
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
			writeError(m.ResponseWriter, code, wire.ReasonNotFound, "not found", fmt.Sprintf("no route %s %s; see GET /v1/status", m.r.Method, m.r.URL.Path))
			return
		}
		writeError(m.ResponseWriter, code, wire.ReasonMethodNotAllowed, "method not allowed",
			fmt.Sprintf("%s is not allowed on %s; allowed: %s", m.r.Method, m.r.URL.Path, m.Header().Get("Allow")))
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
