package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	clocktesting "k8s.io/utils/clock/testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
)

func TestOIDC(t *testing.T) {
	iss := oidcissuer.New(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss.Publish(rsaKey, "rsa-1", jose.RS256)
	iss.Publish(ecKey, "ec-1", jose.ES256)

	// A second, real issuer that no policy trusts.
	foreign := oidcissuer.New(t)
	foreign.Publish(otherRSA, "rsa-1", jose.RS256)

	pol := newPolicy("github-ci", "{repository}:{ref}",
		kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: iss.URL, Audience: []string{"https://kobe.example.com", "kobe"}}},
		allowIf("repository", "my-org/my-repo", "ci-*"),
		allowIf("repository_owner", "my-org", "shared"),
	)
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS})

	now := time.Now()
	claims := func(edit func(map[string]any)) map[string]any {
		c := map[string]any{
			"iss":              iss.URL,
			"aud":              "https://kobe.example.com",
			"sub":              "repo:my-org/my-repo:ref:refs/heads/main",
			"repository":       "my-org/my-repo",
			"repository_owner": "my-org",
			"ref":              "refs/heads/main",
			"iat":              now.Unix(),
			"nbf":              now.Add(-time.Minute).Unix(),
			"exp":              now.Add(5 * time.Minute).Unix(),
		}
		if edit != nil {
			edit(c)
		}
		return c
	}

	t.Run("valid RS256 token", func(t *testing.T) {
		p, err := authenticate(t, a, "Bearer "+oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(nil)))
		if err != nil {
			t.Fatal(err)
		}
		if p.Identity != "my-org/my-repo:refs/heads/main" || p.Policy != "github-ci" || p.Method != MethodOIDC || p.RuleIndex != 0 {
			t.Fatalf("principal %+v", p)
		}
		if !p.AllowsPool("ci-small") || p.AllowsPool("shared") {
			t.Fatalf("pools %v", p.Rule.Pools)
		}
	})
	t.Run("valid ES256 token, second audience as a list, second rule", func(t *testing.T) {
		tok := oidcissuer.MustSign(t, ecKey, "ec-1", jose.ES256, claims(func(c map[string]any) {
			c["aud"] = []string{"someone-else", "kobe"}
			c["azp"] = "kobe"
			c["repository"] = "my-org/other"
		}))
		p, err := authenticate(t, a, "Bearer "+tok)
		if err != nil {
			t.Fatal(err)
		}
		if p.RuleIndex != 1 || !p.AllowsPool("shared") || p.Identity != "my-org/other:refs/heads/main" {
			t.Fatalf("principal %+v", p)
		}
	})
	t.Run("within the leeway", func(t *testing.T) {
		tok := oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(func(c map[string]any) {
			c["exp"] = now.Add(-10 * time.Second).Unix()
			c["nbf"] = now.Add(10 * time.Second).Unix()
		}))
		if _, err := authenticate(t, a, "Bearer "+tok); err != nil {
			t.Fatal(err)
		}
	})

	refused := []struct {
		name   string
		token  string
		want   error
		detail string
	}{
		{"expired", oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() })),
			ErrInvalidCredentials, "expired"},
		{"no exp", oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(func(c map[string]any) { delete(c, "exp") })),
			ErrInvalidCredentials, "exp"},
		{"not yet valid", oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(func(c map[string]any) { c["nbf"] = now.Add(2 * time.Minute).Unix() })),
			ErrInvalidCredentials, "not valid yet"},
		{"wrong audience", oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(func(c map[string]any) { c["aud"] = "https://evil.example.com" })),
			ErrInvalidCredentials, "audience"},
		{"wrong issuer", oidcissuer.MustSign(t, otherRSA, "rsa-1", jose.RS256, claims(func(c map[string]any) { c["iss"] = foreign.URL })),
			ErrInvalidCredentials, "no access policy accepts"},
		{"bad signature (other key, known kid)", oidcissuer.MustSign(t, otherRSA, "rsa-1", jose.RS256, claims(nil)),
			ErrInvalidCredentials, "does not verify"},
		{"alg none", oidcissuer.Unsigned(claims(nil)), ErrInvalidCredentials, "does not verify"},
		{"HS256 (algorithm confusion)", signHS256(t, claims(nil)), ErrInvalidCredentials, "does not verify"},
		{"unknown key id", oidcissuer.MustSign(t, otherRSA, "rsa-unknown", jose.RS256, claims(nil)), ErrInvalidCredentials, "does not verify"},
		{"claims match no rule", oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(func(c map[string]any) {
			c["repository"] = "evil/repo"
			c["repository_owner"] = "evil"
		})), ErrNoMatchingRule, `no rule of policy github-ci matches "evil/repo:refs/heads/main"`},
		{"identity claim missing", oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(func(c map[string]any) { delete(c, "ref") })),
			ErrNoMatchingRule, `claim "ref"`},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			p, err := authenticate(t, a, "Bearer "+tc.token)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %+v, %v; want %v", p, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("detail %q does not mention %q", err, tc.detail)
			}
			if strings.Contains(err.Error(), tc.token) || strings.Contains(err.Error(), strings.Split(tc.token, ".")[1]) {
				t.Fatal("error echoes the token")
			}
		})
	}

	t.Run("key rotation is picked up", func(t *testing.T) {
		newKey, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		tok := oidcissuer.MustSign(t, newKey, "rsa-2", jose.RS256, claims(nil))
		if _, err := authenticate(t, a, "Bearer "+tok); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("unpublished key accepted: %v", err)
		}
		before := iss.JWKSFetches()
		iss.Publish(newKey, "rsa-2", jose.RS256)
		// go-oidc signals a JWKS fetch's waiters a moment before it lets a
		// new fetch start, so a request right after the refusal above may
		// still share that fetch's (old) keys: the new key is picked up by
		// the next request, within moments.
		testenv.Eventually(t, 5*time.Second, "the rotated key to be accepted", func() error {
			_, err := authenticate(t, a, "Bearer "+tok)
			return err
		})
		if iss.JWKSFetches() <= before {
			t.Fatal("JWKS was not fetched again")
		}
		// Known keys are served from the cache.
		before = iss.JWKSFetches()
		if _, err := authenticate(t, a, "Bearer "+oidcissuer.MustSign(t, rsaKey, "rsa-1", jose.RS256, claims(nil))); err != nil {
			t.Fatal(err)
		}
		if iss.JWKSFetches() != before {
			t.Fatal("JWKS fetched for a cached key")
		}
	})
}

// TestOIDCAuthorizedParty: a token for several audiences must name, in
// azp, the client it was issued to, and an azp must be one of the policy's
// audiences (OpenID Connect Core 3.1.3.7, steps 4 and 5): a token that
// another client obtained for itself and that also lists kobe's audience is
// refused, while the usual token, one audience and no azp, is accepted.
func TestOIDCAuthorizedParty(t *testing.T) {
	iss := oidcissuer.New(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss.Publish(key, "rsa-1", jose.RS256)
	pol := newPolicy("people", "{sub}",
		kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: iss.URL, Audience: []string{"kobe-cli", "kobe"}}},
		kobev1.AccessRule{MatchAny: true, Pools: []string{"*"}})
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS})
	now := time.Now()
	for _, tc := range []struct {
		name   string
		aud    any
		azp    any // nil: no azp claim
		detail string
	}{
		{"one audience, no azp", "kobe", nil, ""},
		{"one audience, azp is that audience", "kobe-cli", "kobe-cli", ""},
		{"one audience, azp the policy's other audience", "kobe", "kobe-cli", ""},
		{"one audience, azp another client", "kobe", "some-web-app", "issued to another client"},
		{"one audience as a list, no azp", []string{"kobe"}, nil, ""},
		{"several audiences, azp the policy's", []string{"kobe", "account"}, "kobe", ""},
		{"several audiences, azp the policy's other audience", []string{"kobe", "account"}, "kobe-cli", ""},
		{"several audiences with the policy's, azp another client", []string{"some-web-app", "kobe"}, "some-web-app", "issued to another client"},
		{"several audiences with the policy's, no azp", []string{"some-web-app", "kobe"}, nil, "several audiences and no azp"},
		{"several audiences, azp null", []string{"some-web-app", "kobe"}, json.RawMessage("null"), "several audiences and no azp"},
		{"azp empty", "kobe", "", "issued to another client"},
		{"azp a number", "kobe", 7, "malformed claims"},
		{"azp a list", []string{"kobe", "account"}, []string{"kobe"}, "malformed claims"},
		{"azp differs in case", "kobe", "KOBE", "issued to another client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := map[string]any{"iss": iss.URL, "sub": "ada", "aud": tc.aud, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
			if tc.azp != nil {
				c["azp"] = tc.azp
			}
			p, err := authenticate(t, a, "Bearer "+oidcissuer.MustSign(t, key, "rsa-1", jose.RS256, c))
			if tc.detail == "" {
				if err != nil || p.Identity != "ada" {
					t.Fatalf("got %+v, %v; want ada accepted", p, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("got %+v, %v; want invalid credentials saying %q", p, err, tc.detail)
			}
		})
	}
}

// signHS256 signs with HMAC, the classic algorithm-confusion attack; the
// verifier must refuse the algorithm before looking at keys.
func signHS256(t *testing.T, claims map[string]any) string {
	t.Helper()
	return oidcissuer.MustSign(t, []byte("secret-bytes-secret-bytes-secret"), "rsa-1", jose.HS256, claims)
}

func TestOIDCUnreachableIssuerFailsClosed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	_ = l.Close()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pol := newPolicy("dead", "", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: dead, Audience: []string{"kobe"}}}, allow("*"))
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS})
	tok := oidcissuer.MustSign(t, key, "k", jose.RS256, map[string]any{"iss": dead, "aud": "kobe", "sub": "x", "exp": time.Now().Add(time.Hour).Unix()})
	for range 2 { // the second attempt is answered from the backoff
		if _, err := authenticate(t, a, "Bearer "+tok); !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), "unreachable") {
			t.Fatalf("got %v", err)
		}
	}
}

// TestOIDCKeyRefreshRateLimited: tokens with made-up key ids cost the
// issuer at most jwksRefreshBurst fetches, then one per jwksRefreshEvery,
// while known keys keep working and a genuinely rotated key is picked up
// once the limit allows (on an injected clock, so nothing waits).
func TestOIDCKeyRefreshRateLimited(t *testing.T) {
	iss := oidcissuer.New(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	attacker, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss.Publish(key, "k1", jose.RS256)
	pol := newPolicy("ci", "", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: iss.URL, Audience: []string{"kobe"}}}, allowIf("sub", "ci", "*"))
	clk := clocktesting.NewFakeClock(time.Now())
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS, Clock: clk})
	tokenFor := func(k *rsa.PrivateKey, kid string) string {
		return "Bearer " + oidcissuer.MustSign(t, k, kid, jose.RS256, map[string]any{
			"iss": iss.URL, "aud": "kobe", "sub": "ci", "exp": clk.Now().Add(time.Hour).Unix(),
		})
	}
	good := tokenFor(key, "k1")
	if _, err := authenticate(t, a, good); err != nil {
		t.Fatal(err)
	}
	start := iss.JWKSFetches() // discovery's own load

	// A flood of random kids, from many goroutines at once.
	var wg sync.WaitGroup
	var accepted atomic.Int32
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				if _, err := authenticate(t, a, tokenFor(attacker, fmt.Sprintf("random-%d-%d", g, i))); err == nil {
					accepted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if accepted.Load() != 0 {
		t.Fatalf("%d tokens with unknown kids accepted", accepted.Load())
	}
	if got := iss.JWKSFetches() - start; got < 1 || got > jwksRefreshBurst {
		t.Fatalf("%d JWKS fetches for 200 tokens with random kids, want 1 to %d", got, jwksRefreshBurst)
	}
	// The known key still works, from the cache.
	before := iss.JWKSFetches()
	if _, err := authenticate(t, a, good); err != nil {
		t.Fatalf("known key during the flood: %v", err)
	}
	if iss.JWKSFetches() != before {
		t.Fatal("a known key caused a fetch")
	}

	// A rotated key arrives while the budget is spent: refused with a
	// message to retry, then accepted once a refresh is allowed again.
	newKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss.Publish(newKey, "k2", jose.RS256)
	rotated := tokenFor(newKey, "k2")
	if _, err := authenticate(t, a, rotated); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("rotated key with the budget spent: %v", err)
	}
	clk.Step(jwksRefreshEvery)
	if _, err := authenticate(t, a, rotated); err != nil {
		t.Fatalf("rotated key %s later: %v", jwksRefreshEvery, err)
	}

	// A sustained flood over one minute: at most a burst plus one per
	// jwksRefreshEvery.
	before = iss.JWKSFetches()
	for s := range 60 {
		clk.Step(time.Second)
		for i := range 5 {
			if _, err := authenticate(t, a, tokenFor(attacker, fmt.Sprintf("minute-%d-%d", s, i))); err == nil {
				t.Fatal("token with an unknown kid accepted")
			}
		}
	}
	limit := jwksRefreshBurst + int(time.Minute/jwksRefreshEvery)
	if got := iss.JWKSFetches() - before; got > limit {
		t.Fatalf("%d JWKS fetches in a minute of random kids, want at most %d", got, limit)
	}
	t.Logf("JWKS fetches in a minute of 300 tokens with random kids: %d (limit %d)", iss.JWKSFetches()-before, limit)
}
