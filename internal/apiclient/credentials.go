package apiclient

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Credentials authenticate one request. Apply is called once per request,
// after the body and every other header are set, so an implementation may
// sign them; body is the exact request body (nil when there is none).
type Credentials interface {
	Apply(req *http.Request, body []byte) error
}

// Anonymous sends no credentials; GET /v1/status is the only route it reaches
// (besides health and metrics).
type Anonymous struct{}

// Apply does nothing.
func (Anonymous) Apply(*http.Request, []byte) error { return nil }

// BearerToken sends a fixed token as "Authorization: Bearer <token>": a
// token from an AccessPolicy's Secret, or an OIDC ID token.
type BearerToken string

// Apply sets the Authorization header.
func (t BearerToken) Apply(req *http.Request, _ []byte) error {
	tok := strings.TrimSpace(string(t))
	if tok == "" {
		return errors.New("bearer token is empty")
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return nil
}

// BearerTokenFile sends the token held in a file, read again on every
// request because ServiceAccount and OIDC tokens are rotated in place.
type BearerTokenFile string

// DefaultServiceAccountTokenFile is where a pod finds its projected
// ServiceAccount token.
const DefaultServiceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// Apply reads the file and sets the Authorization header.
func (f BearerTokenFile) Apply(req *http.Request, body []byte) error {
	data, err := os.ReadFile(string(f))
	if err != nil {
		return fmt.Errorf("reading token file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return fmt.Errorf("token file %s is empty", string(f))
	}
	return BearerToken(tok).Apply(req, body)
}

// credentialsError marks a failure to produce credentials (unreadable token
// file, no SSH agent): retrying the request cannot fix it.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }
