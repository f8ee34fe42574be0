package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/truncate"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// What a request carries reaches the log cut (truncate.Log), so that a
// request, with credentials or without, writes a bounded line whatever it
// sent: net/http bounds the request line and headers to maxHeaderBytes, far
// more than a log line should hold.
const (
	maxLoggedMethod = 16
	maxLoggedPath   = 256
	// maxLoggedReason bounds an error's text, which may echo the request
	// (an authentication error can quote what a token claims).
	maxLoggedReason = 1024
)

// requestKV are the key/values that name r in a log line.
func requestKV(r *http.Request) []any {
	return []any{"method", truncate.Log(r.Method, maxLoggedMethod), "path", truncate.Log(r.URL.Path, maxLoggedPath)}
}

// principalKey is the context key of the caller's *auth.Principal.
type principalKey struct{}

// principal is the caller that authenticate admitted. Handlers behind
// authenticate always have one.
func principal(r *http.Request) *auth.Principal {
	p, _ := r.Context().Value(principalKey{}).(*auth.Principal)
	return p
}

// authenticate admits only authenticated callers to next: it takes the
// body bufferBody read (within MaxBodyBytes), authenticates the request with it (401,
// or 403 when no rule of the caller's policy matches), puts the principal in
// the request's context and hands next the body again. When optional, a
// request without an Authorization header passes without a principal.
func (s *Server) authenticate(optional bool, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := s.readBody(w, r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if optional && r.Header.Get("Authorization") == "" {
			next(w, r)
			return
		}
		started := time.Now()
		p, err := s.opts.Auth.Authenticate(r.Context(), r, body)
		if r.Method == http.MethodPost && r.URL.Path == "/v1/leases" {
			metrics.HandoutPhase(metrics.PhaseAuthenticate, time.Since(started))
		}
		if err != nil {
			s.opts.Log.Info("Request refused", append(requestKV(r), "reason", truncate.Log(err.Error(), maxLoggedReason))...)
			writeAuthError(w, err)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// errBodyTooLarge is a request body beyond MaxBodyBytes.
var errBodyTooLarge = errors.New("request body too large")

// bufferBody reads the whole body, within MaxBodyBytes and BodyReadTimeout,
// before next runs, and hands next the bytes read.
func (s *Server) bufferBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.readingBodies.Add(1)
		rc := http.NewResponseController(w)
		// Recorders in tests have no connection to set a deadline on.
		if err := rc.SetReadDeadline(time.Now().Add(s.opts.BodyReadTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			s.opts.Log.Error(err, "Setting the body read deadline failed")
		}
		body, err := s.readBody(w, r)
		s.readingBodies.Add(-1)
		// Nothing more is read from this request; a deadline left in place
		// would cancel the request's context (net/http's background read
		// fails with it) while the handler still works.
		_ = rc.SetReadDeadline(time.Time{})
		if err != nil {
			// Close the connection after the answer: net/http would
			// otherwise read the rest of a body that never ends.
			w.Header().Set("Connection", "close")
			s.fail(w, r, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("%w: the body must be at most %d bytes", errBodyTooLarge, s.opts.MaxBodyBytes)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("%w: the body was not received within %s", errBadRequest, s.opts.BodyReadTimeout)
		}
		return nil, fmt.Errorf("%w: the body could not be read: %w", errBadRequest, err)
	}
	return body, nil
}

// limitInFlight answers 429 with Retry-After once MaxInFlight requests are
// being served.
func (s *Server) limitInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.inFlight <- struct{}{}:
			held := &inFlightSlot{slots: s.inFlight, held: true}
			defer held.release()
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), inFlightSlotKey{}, held)))
		default:
			s.tooManyRequests(w)
		}
	})
}

func (s *Server) tooManyRequests(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusTooManyRequests, wire.ReasonTooManyRequests, "too many requests",
		"the server is handling "+strconv.Itoa(cap(s.inFlight))+" requests; retry after a second")
}

// inFlightSlot is a request's place among the MaxInFlight served at once.
// A request that waits for a change (GET /v1/leases/{id}?wait=) gives it up
// while it waits, so that waiting callers do not crowd out the others, and
// takes one again to answer. Only the request's own goroutine uses it.
type inFlightSlot struct {
	slots chan struct{}
	held  bool
}

type inFlightSlotKey struct{}

func (h *inFlightSlot) release() {
	if h.held {
		<-h.slots
		h.held = false
	}
}

// reacquire waits for a slot until ctx ends.
func (h *inFlightSlot) reacquire(ctx context.Context) error {
	if h.held {
		return nil
	}
	select {
	case h.slots <- struct{}{}:
		h.held = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
				log.Error(errors.New(truncate.Log(fmt.Sprint(v), maxLoggedReason)), "Panic serving request", requestKV(r)...)
				writeError(w, http.StatusInternalServerError, wire.ReasonInternalError, "internal error", "the server failed to handle the request; it has been logged")
			}
		}()
		next.ServeHTTP(w, r)
	})
}
