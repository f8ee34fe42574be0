package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kunobi-ninja/kobe/internal/auth"
)

// request is an authenticated API call: its body (already size-limited) and
// the caller.
type request struct {
	body      []byte
	principal *auth.Principal
}

// authenticate reads the body within the size limit and authenticates the
// caller. It writes the error response itself and returns nil on failure.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) *request {
	body, ok := s.readBody(w, r)
	if !ok {
		return nil
	}
	p, err := s.opts.Auth.Authenticate(r.Context(), r, body)
	if err != nil {
		s.opts.Log.Info("Request refused", "method", r.Method, "path", r.URL.Path, "reason", err.Error())
		writeAuthError(w, err)
		return nil
	}
	return &request{body: body, principal: p}
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil {
		return nil, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request body too large", fmt.Sprintf("the body must be at most %d bytes", s.opts.MaxBodyBytes))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "unreadable body", err.Error())
		return nil, false
	}
	return body, true
}

// decodeBody decodes a JSON object strictly: unknown fields are refused so
// that a typo ("tll") is an error rather than a silently ignored setting.
func decodeBody(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("the body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body is not valid JSON for this route: %w", err)
	}
	if dec.More() {
		return errors.New("the body has data after the JSON object")
	}
	return nil
}

// parseTTL parses a positive duration such as "30m". field names the JSON
// field for the error message.
func parseTTL(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a duration; use a value such as \"30m\" or \"1h30m\"", field, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s must be greater than zero, got %q", field, v)
	}
	if d < time.Second {
		return 0, fmt.Errorf("%s must be at least 1s, got %q", field, v)
	}
	return d, nil
}

// validName checks a pool or lease name before it reaches the API server.
func validName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%s is required", kind)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%s %q is not a valid name: %s", kind, name, strings.Join(errs, "; "))
	}
	return nil
}
