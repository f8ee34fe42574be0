package apiclient

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Error is a non-2xx answer of the API: its JSON body (error, detail and
// the machine-readable reason, one of the wire.Reason* constants) plus what
// the client read from the response.
type Error struct {
	wire.ErrorBody

	// StatusCode is the HTTP status of the response.
	StatusCode int `json:"-"`
	// RetryAfter is the response's Retry-After (429 and 503), or zero.
	RetryAfter time.Duration `json:"-"`
}

// Error renders "message: detail (HTTP 409, Reason)".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " (HTTP %d", e.StatusCode)
		if e.Reason != "" {
			fmt.Fprintf(&b, ", %s", e.Reason)
		}
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, ", retry after %s", e.RetryAfter)
		}
		b.WriteString(")")
	}
	return b.String()
}

// IsStatus reports whether err is (or wraps) an *Error with the given HTTP status.
func IsStatus(err error, code int) bool {
	var apiErr *Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == code
}

// HasReason reports whether err is (or wraps) an *Error whose reason is
// reason (one of the wire.Reason* constants).
func HasReason(err error, reason string) bool {
	var apiErr *Error
	return errors.As(err, &apiErr) && apiErr.Reason == reason
}

// IsNotFound reports whether err is a 404 from the API.
func IsNotFound(err error) bool { return IsStatus(err, http.StatusNotFound) }

// IsUnauthorized reports whether err is a 401 from the API.
func IsUnauthorized(err error) bool { return IsStatus(err, http.StatusUnauthorized) }

// parseRetryAfter reads a Retry-After header in either of its forms
// (delay-seconds or HTTP-date).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}

// LeaseEndedError is returned by WaitBound when the lease reached a phase
// from which it can never become Bound.
type LeaseEndedError struct {
	Lease *wire.Lease
}

func (e *LeaseEndedError) Error() string {
	msg := fmt.Sprintf("lease %s ended before it was bound: phase %s", e.Lease.ID, e.Lease.Phase)
	if e.Lease.Reason != "" {
		msg += ": " + e.Lease.Reason
	}
	return msg
}
