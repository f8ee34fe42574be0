package accesspolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
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

// checkIssuer runs OIDC discovery and fetches the issuer's key set.
func (r *Reconciler) checkIssuer(ctx context.Context, issuer string) error {
	hc := r.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: issuerTimeout}
	}
	ctx, cancel := context.WithTimeout(ctx, issuerTimeout)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, hc), issuer)
	if err != nil {
		return fmt.Errorf("discovery failed: %w", err)
	}
	var doc struct {
		JWKSURI string `json:"jwks_uri"`
	}
	if err := p.Claims(&doc); err != nil || doc.JWKSURI == "" {
		return errors.New("discovery document has no jwks_uri")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, doc.JWKSURI, nil)
	if err != nil {
		return fmt.Errorf("jwks_uri: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("fetching keys: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching keys: %s", resp.Status)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return errors.New("key set is not JSON")
	}
	if len(set.Keys) == 0 {
		return errors.New("key set is empty")
	}
	return nil
}
