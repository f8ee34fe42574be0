package accesspolicy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
)

const issuerTimeout = 10 * time.Second

// checkSecret looks at the token Secret's presence and key, never at its
// value beyond "empty or not". done reports a verdict that ends the check.
func (r *Reconciler) checkSecret(ctx context.Context, pol *kobev1.AccessPolicy) (verdict, bool, error) {
	ref := pol.Spec.Auth.Token.SecretRef
	key := auth.SecretKey(ref)
	var s corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: pol.Namespace, Name: ref.Name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return verdict{reason: kobev1.ReasonSecretNotFound, message: fmt.Sprintf("Secret %s not found", ref.Name)}, true, nil
	case err != nil:
		return verdict{}, true, fmt.Errorf("reading Secret %s: %w", ref.Name, err)
	}
	if len(s.Data[key]) == 0 {
		return verdict{reason: kobev1.ReasonSecretNotFound, message: fmt.Sprintf("Secret %s has no non-empty key %q", ref.Name, key)}, true, nil
	}
	return verdict{}, false, nil
}

// checkIssuer runs OIDC discovery and fetches the issuer's key set, from
// https URLs only (http to loopback). What it returns goes into the policy's
// status, which the policy's author reads: so its errors are fixed texts
// naming the step and the kind of failure (a status class, a network error
// kind), never anything the remote end sent, or a policy would be a way to
// read the services the operator reaches. go-oidc's discovery is not used
// here for that reason: its errors carry the answer's body.
func (r *Reconciler) checkIssuer(ctx context.Context, issuer string) error {
	if err := auth.ValidateIssuer(issuer); err != nil {
		return err
	}
	hc := r.issuerClient()
	ctx, cancel := context.WithTimeout(ctx, issuerTimeout)
	defer cancel()
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := fetchJSON(ctx, hc, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	// The same rule as go-oidc's, which the authenticator uses.
	if doc.Issuer != issuer {
		return errors.New("discovery: the document names another issuer")
	}
	keys, err := url.Parse(doc.JWKSURI)
	switch {
	case doc.JWKSURI == "" || err != nil:
		return errors.New("discovery: the document has no valid jwks_uri")
	case auth.SecureURL(keys) != nil:
		return errors.New("discovery: jwks_uri is neither https nor http to a loopback host")
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := fetchJSON(ctx, hc, keys.String(), &set); err != nil {
		return fmt.Errorf("fetching keys: %w", err)
	}
	if len(set.Keys) == 0 {
		return errors.New("fetching keys: the key set is empty")
	}
	return nil
}

// maxIssuerDocument bounds what is read of a discovery document or key set.
const maxIssuerDocument = 1 << 20

var (
	errInsecureRedirect = errors.New("redirected to a URL that is neither https nor http to a loopback host")
	errTooManyRedirects = errors.New("redirected more than 10 times")
)

// issuerClient is the configured client, following only redirects that
// SecureURL allows.
func (r *Reconciler) issuerClient() *http.Client {
	hc := http.Client{Timeout: issuerTimeout}
	if r.HTTPClient != nil {
		hc = *r.HTTPClient
	}
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errTooManyRedirects
		}
		if auth.SecureURL(req.URL) != nil {
			return errInsecureRedirect
		}
		return nil
	}
	return &hc
}

// fetchJSON GETs target and decodes its JSON answer into v. Its errors are
// fixed texts (see checkIssuer).
func fetchJSON(ctx context.Context, hc *http.Client, target string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return errors.New("the URL cannot be requested")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return errors.New(requestFailure(err))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the answer is HTTP %dxx, not 200", resp.StatusCode/100)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxIssuerDocument)).Decode(v); err != nil {
		return errors.New("the answer is not a JSON document")
	}
	return nil
}

// requestFailure names the kind of a failed request, in words that carry
// nothing of the error's own text.
func requestFailure(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recordErr tls.RecordHeaderError
	var netErr net.Error
	switch {
	case errors.Is(err, errInsecureRedirect):
		return errInsecureRedirect.Error()
	case errors.Is(err, errTooManyRedirects):
		return errTooManyRedirects.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "the request timed out"
	case errors.As(err, &dnsErr):
		return "the host name does not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the connection was refused"
	case errors.As(err, &certErr), errors.As(err, &recordErr):
		return "the TLS handshake failed"
	}
	return "the request failed"
}
