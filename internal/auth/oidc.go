package auth

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/truncate"
)

// SigningAlgorithms are the JWS algorithms accepted on ID tokens: asymmetric
// only, never "none" or HMAC.
var SigningAlgorithms = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.EdDSA,
}

const (
	// providerRefresh is how often an issuer's discovery document and keys
	// are read again (keys are also refreshed, at a limited rate, when a
	// token names an unknown key id: see keySet).
	providerRefresh = time.Hour
	// discoveryTimeout bounds one discovery request.
	discoveryTimeout = 10 * time.Second
	// maxDiscoveryBackoff caps the wait between discovery retries.
	maxDiscoveryBackoff = time.Minute
)

// oidcResult is one token's verification against one issuer, shared by the
// policies of that issuer during one request.
type oidcResult struct {
	claims   Claims
	audience []string
	// azp is the token's authorized party, nil without one.
	azp *string
	err error
}

func (a *Authenticator) oidcClaims(ctx context.Context, pol *kobev1.AccessPolicy, cred *credential) (Claims, error) {
	issuer := pol.Spec.Auth.OIDC.Issuer
	res, ok := cred.oidc[issuer]
	if !ok {
		res = a.verifyOIDC(ctx, issuer, cred.bearer)
		if cred.oidc == nil {
			cred.oidc = map[string]*oidcResult{}
		}
		cred.oidc[issuer] = res
	}
	if res.err != nil {
		return nil, res.err
	}
	if !intersects(res.audience, pol.Spec.Auth.OIDC.Audience) {
		return nil, errors.New("OIDC token is not issued for an accepted audience")
	}
	if err := checkAuthorizedParty(res.audience, res.azp, pol.Spec.Auth.OIDC.Audience); err != nil {
		return nil, err
	}
	return res.claims, nil
}

// checkAuthorizedParty is OpenID Connect Core 3.1.3.7, steps 4 and 5, with
// the policy's audiences as the client IDs kobe answers to: a token for
// several audiences must name the client it was issued to (azp), and an
// azp, when present, must be one of the policy's audiences. Otherwise a
// token that another client obtained for itself, and that merely lists
// kobe's audience beside its own, would let that client act here as the
// token's subject. A token for one audience without azp was issued to that
// audience, as most issuers issue them, and is accepted.
func checkAuthorizedParty(aud []string, azp *string, accepted []string) error {
	switch {
	case azp != nil && !slices.Contains(accepted, *azp):
		return errors.New("OIDC token was issued to another client: its azp is none of the policy's audiences")
	case azp == nil && len(aud) > 1:
		return errors.New("OIDC token names several audiences and no azp (the client it was issued to)")
	}
	return nil
}

// verifyOIDC verifies raw with go-oidc (signature with the issuer's keys,
// algorithm, issuer) and checks exp and nbf with the leeway. Its errors are
// safe details; the causes are logged.
func (a *Authenticator) verifyOIDC(ctx context.Context, issuer, raw string) *oidcResult {
	verifier, err := a.providers.verifier(ctx, issuer)
	if err != nil {
		return &oidcResult{err: errors.New("OIDC issuer is unreachable; try again later")}
	}
	tok, err := verifier.Verify(ctx, raw)
	if err != nil {
		a.log.V(1).Info("OIDC token refused", "issuer", issuer, "reason", truncate.Log(err.Error(), maxLoggedReason))
		return &oidcResult{err: errors.New("OIDC token does not verify against the issuer's keys")}
	}
	now := a.clock.Now()
	if tok.Expiry.IsZero() {
		return &oidcResult{err: errors.New("OIDC token has no exp claim")}
	}
	if now.After(tok.Expiry.Add(a.leeway)) {
		return &oidcResult{err: errors.New("OIDC token has expired")}
	}
	// Read from the verified token: the signature covers them.
	var checked struct {
		NotBefore *json.Number `json:"nbf"`
		// AuthorizedParty is azp, which must be a string when present.
		AuthorizedParty *string `json:"azp"`
	}
	if err := tok.Claims(&checked); err != nil {
		return &oidcResult{err: errors.New("OIDC token has malformed claims")}
	}
	if checked.NotBefore != nil {
		nbf, err := checked.NotBefore.Float64()
		if err != nil || math.IsNaN(nbf) || math.IsInf(nbf, 0) {
			return &oidcResult{err: errors.New("OIDC token has a malformed nbf claim")}
		}
		sec, frac := math.Modf(nbf)
		if now.Add(a.leeway).Before(time.Unix(int64(sec), int64(frac*1e9))) {
			return &oidcResult{err: errors.New("OIDC token is not valid yet (nbf)")}
		}
	}
	var raws json.RawMessage
	if err := tok.Claims(&raws); err != nil {
		return &oidcResult{err: errors.New("OIDC token has malformed claims")}
	}
	claims, err := decodeClaims(raws)
	if err != nil {
		return &oidcResult{err: errors.New("OIDC token has malformed claims")}
	}
	return &oidcResult{claims: claims, audience: tok.Audience, azp: checked.AuthorizedParty}
}

// providerCache keeps one go-oidc provider (discovery document and its
// remote key set) per issuer. Discovery failures are retried with backoff;
// until an issuer has been discovered its policies authenticate nobody.
type providerCache struct {
	client *http.Client
	clock  clock.PassiveClock
	log    logr.Logger

	mu      sync.Mutex
	entries map[string]*providerEntry
}

type providerEntry struct {
	mu         sync.Mutex // serialises discovery of one issuer
	verifier   *oidc.IDTokenVerifier
	discovered time.Time
	err        error
	failures   int
	retryAt    time.Time
}

func newProviderCache(c *http.Client, clk clock.PassiveClock, log logr.Logger) *providerCache {
	return &providerCache{client: c, clock: clk, log: log, entries: map[string]*providerEntry{}}
}

// verifier returns the issuer's token verifier, discovering the issuer when
// it is new, when the last discovery is older than providerRefresh (a failed
// refresh keeps the old keys), or when a failed discovery may be retried.
func (c *providerCache) verifier(ctx context.Context, issuer string) (*oidc.IDTokenVerifier, error) {
	c.mu.Lock()
	e, ok := c.entries[issuer]
	if !ok {
		e = &providerEntry{}
		c.entries[issuer] = e
	}
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	now := c.clock.Now()
	if e.verifier != nil && now.Sub(e.discovered) < providerRefresh {
		return e.verifier, nil
	}
	if e.verifier == nil && e.err != nil && now.Before(e.retryAt) {
		return nil, e.err
	}
	v, err := c.discover(ctx, issuer)
	if err != nil {
		e.failures++
		e.retryAt = now.Add(backoff(e.failures, time.Second, maxDiscoveryBackoff))
		if e.verifier != nil {
			c.log.Info("Refreshing OIDC discovery failed; keeping the known keys", "issuer", issuer, "reason", err.Error())
			// Try again once the backoff has passed.
			e.discovered = e.retryAt.Add(-providerRefresh)
			return e.verifier, nil
		}
		c.log.Info("OIDC discovery failed; the issuer's policies authenticate nobody until it succeeds", "issuer", issuer, "retryIn", e.retryAt.Sub(now).String(), "reason", err.Error())
		e.err = err
		return nil, err
	}
	e.verifier, e.discovered, e.err, e.failures = v, now, nil, 0
	return v, nil
}

func (c *providerCache) discover(ctx context.Context, issuer string) (*oidc.IDTokenVerifier, error) {
	// The provider keeps this client for its key set, which refreshes in
	// the background: a cancelled request must not cancel discovery.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discoveryTimeout)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(dctx, c.client), issuer)
	if err != nil {
		return nil, err
	}
	var meta struct {
		JWKSURL string `json:"jwks_uri"`
	}
	if err := p.Claims(&meta); err != nil || meta.JWKSURL == "" {
		return nil, errors.New("the discovery document names no jwks_uri")
	}
	// The first load is part of discovery (and its backoff), outside the
	// rate limit of refreshes on unknown key ids.
	keys := newKeySet(meta.JWKSURL, c.client, c.clock, c.log.WithValues("issuer", issuer))
	if _, err := keys.load(dctx); err != nil {
		return nil, err
	}
	return oidc.NewVerifier(issuer, keys, &oidc.Config{
		// Audiences are per policy and checked by oidcClaims.
		SkipClientIDCheck: true,
		// exp and nbf are checked with our leeway and clock.
		SkipExpiryCheck:      true,
		SupportedSigningAlgs: SigningAlgorithms,
	}), nil
}

// retain forgets the issuers no policy names any more.
func (c *providerCache) retain(policies []kobev1.AccessPolicy) {
	keep := map[string]bool{}
	for i := range policies {
		if o := policies[i].Spec.Auth.OIDC; o != nil {
			keep[o.Issuer] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for issuer := range c.entries {
		if !keep[issuer] {
			delete(c.entries, issuer)
		}
	}
}

// backoff doubles from base per failure up to max.
func backoff(failures int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
