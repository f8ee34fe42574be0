package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

const (
	// jwksRefreshEvery and jwksRefreshBurst rate-limit the key set
	// refreshes that tokens with an unknown key id trigger: a flood of
	// random kids costs the issuer at most jwksRefreshBurst fetches, then one
	// per jwksRefreshEvery, while a genuinely rotated key is picked up at
	// once, or within jwksRefreshEvery during such a flood.
	jwksRefreshEvery = 10 * time.Second
	jwksRefreshBurst = 3
	// maxJWKSBytes bounds a key set document.
	maxJWKSBytes = 1 << 20
)

var (
	errUnknownKeyRateLimited = errors.New("token key id is unknown and the issuer's keys were refreshed moments ago; try again in a few seconds")
	errSignature             = errors.New("token signature does not verify against the issuer's keys")
)

// keySet is an oidc.KeySet over an issuer's JWKS that refreshes only when a
// token names a key id it does not know, at a limited rate. go-oidc's
// RemoteKeySet refetches on every verification failure, so every request
// with a made-up kid would cost the issuer a fetch.
type keySet struct {
	url     string
	client  *http.Client
	clock   clock.PassiveClock
	limiter *rate.Limiter
	algs    []jose.SignatureAlgorithm
	log     logr.Logger

	mu   sync.RWMutex
	keys []jose.JSONWebKey

	refreshes singleflight.Group
}

func newKeySet(url string, c *http.Client, clk clock.PassiveClock, log logr.Logger) *keySet {
	algs := make([]jose.SignatureAlgorithm, len(SigningAlgorithms))
	for i, a := range SigningAlgorithms {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	return &keySet{
		url: url, client: c, clock: clk, log: log, algs: algs,
		limiter: rate.NewLimiter(rate.Every(jwksRefreshEvery), jwksRefreshBurst),
	}
}

// VerifySignature implements oidc.KeySet: the token must verify with the
// cached key of its kid (any cached key when it names none); an unknown kid
// refreshes the keys first, if the rate limit allows.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, k.algs)
	if err != nil {
		return nil, fmt.Errorf("malformed token: %w", err)
	}
	kid := ""
	if len(jws.Signatures) > 0 {
		kid = jws.Signatures[0].Header.KeyID
	}
	k.mu.RLock()
	keys := k.keys
	k.mu.RUnlock()
	payload, known, err := verifyWith(jws, keys, kid)
	if err == nil || known {
		// A bad signature under a known kid: refreshing cannot help.
		return payload, err
	}
	if keys, err = k.refresh(ctx); err != nil {
		return nil, err
	}
	payload, _, err = verifyWith(jws, keys, kid)
	return payload, err
}

// verifyWith verifies jws with the keys of kid (every key when kid is
// empty); known says whether kid named a key.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) (payload []byte, known bool, err error) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		known = kid != ""
		if payload, err := jws.Verify(&keys[i]); err == nil {
			return payload, known, nil
		}
	}
	return nil, known, errSignature
}

// refresh fetches the keys once for all concurrent callers, when the rate
// limit allows, and returns the keys to use.
func (k *keySet) refresh(ctx context.Context) ([]jose.JSONWebKey, error) {
	v, err, _ := k.refreshes.Do("", func() (any, error) {
		if !k.limiter.AllowN(k.clock.Now(), 1) {
			return nil, errUnknownKeyRateLimited
		}
		// Shared by every waiting request: none of them may cancel it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discoveryTimeout)
		defer cancel()
		return k.load(fctx)
	})
	if err != nil {
		return nil, err
	}
	return v.([]jose.JSONWebKey), nil
}

// load fetches the key set and caches it; on failure the old keys stay.
func (k *keySet) load(ctx context.Context) ([]jose.JSONWebKey, error) {
	keys, err := k.fetch(ctx)
	if err != nil {
		k.log.Info("Fetching the OIDC issuer's keys failed; keeping the known keys", "url", k.url, "reason", err.Error())
		return nil, fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	k.mu.Lock()
	k.keys = keys
	k.mu.Unlock()
	return keys, nil
}

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", k.url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("GET %s: key set larger than %d bytes", k.url, maxJWKSBytes)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("GET %s: not a JSON key set: %w", k.url, err)
	}
	// Keys of types or algorithms this library does not know are skipped,
	// as go-oidc does, rather than failing the whole set.
	var keys []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var key jose.JSONWebKey
		if err := key.UnmarshalJSON(raw); err != nil || key.Use == "enc" || !key.Valid() || !key.IsPublic() {
			continue
		}
		keys = append(keys, key)
	}
	return keys, nil
}
