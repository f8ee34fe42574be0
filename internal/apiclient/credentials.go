package apiclient

import (
	"errors"
	"fmt"
	"io/fs"
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
// (besides the probes).
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

// Where a pod finds ServiceAccount tokens.
const (
	// DefaultServiceAccountTokenFile is a ServiceAccount token projected
	// for kobe's audience (docs/auth.md shows the volume): a token that
	// the host API server does not accept. When the file does not exist,
	// BearerTokenFile(DefaultServiceAccountTokenFile) sends
	// KubernetesServiceAccountTokenFile instead.
	DefaultServiceAccountTokenFile = "/var/run/secrets/kobe/token"
	// KubernetesServiceAccountTokenFile is the token every pod gets by
	// default, issued for the host API server.
	KubernetesServiceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// Apply reads the file and sets the Authorization header.
func (f BearerTokenFile) Apply(req *http.Request, body []byte) error {
	data, err := readTokenFile(string(f), DefaultServiceAccountTokenFile, KubernetesServiceAccountTokenFile)
	if err != nil {
		return err
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return fmt.Errorf("token file %s is empty", string(f))
	}
	return BearerToken(tok).Apply(req, body)
}

// readTokenFile reads path, or fallback when path is preferred and does
// not exist (a pod without kobe's projected token).
func readTokenFile(path, preferred, fallback string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && path == preferred {
		data, err = os.ReadFile(fallback)
	}
	if err != nil {
		return nil, fmt.Errorf("reading token file: %w", err)
	}
	return data, nil
}

// credentialsError marks a failure to produce credentials (unreadable token
// file, no SSH agent): retrying the request cannot fix it.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }
