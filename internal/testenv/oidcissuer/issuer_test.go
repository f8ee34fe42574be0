package oidcissuer_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"

	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
)

// TestGoOIDCAcceptsSignedTokens checks the issuer against the verifier kobe
// uses: discovery works, tokens signed with a published key verify, and
// tokens with an unpublished key, a published key id but another key, or no
// signature are refused.
func TestGoOIDCAcceptsSignedTokens(t *testing.T) {
	iss := oidcissuer.New(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss.Publish(rsaKey, "rsa", jose.RS256)
	iss.Publish(ecKey, "ec", jose.ES256)

	ctx := t.Context()
	provider, err := oidc.NewProvider(ctx, iss.URL)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	verifier := provider.Verifier(&oidc.Config{ClientID: "kobe", SupportedSigningAlgs: []string{"RS256", "ES256"}})
	now := time.Now()
	claims := map[string]any{"iss": iss.URL, "aud": "kobe", "sub": "alice", "iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}

	for _, tc := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"RS256 with a published key", oidcissuer.MustSign(t, rsaKey, "rsa", jose.RS256, claims), true},
		{"ES256 with a published key", oidcissuer.MustSign(t, ecKey, "ec", jose.ES256, claims), true},
		{"unpublished key", oidcissuer.MustSign(t, otherKey, "other", jose.RS256, claims), false},
		{"published kid, other key", oidcissuer.MustSign(t, otherKey, "rsa", jose.RS256, claims), false},
		{"unsigned", oidcissuer.Unsigned(claims), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := verifier.Verify(ctx, tc.token)
			if tc.ok {
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				if tok.Subject != "alice" || tok.Issuer != iss.URL {
					t.Fatalf("verified token has subject %q issuer %q", tok.Subject, tok.Issuer)
				}
				return
			}
			if err == nil {
				t.Fatal("verifier accepted the token")
			}
		})
	}
	if iss.JWKSFetches() == 0 || iss.Hits() <= iss.JWKSFetches() {
		t.Fatalf("counters: %d hits, %d JWKS fetches; want discovery and JWKS both counted", iss.Hits(), iss.JWKSFetches())
	}
}
