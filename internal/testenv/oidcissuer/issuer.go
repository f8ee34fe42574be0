package oidcissuer

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// Issuer is an OpenID provider whose URL is its issuer. Its JWKS holds the
// keys published so far and can change while tests run (key rotation).
type Issuer struct {
	*httptest.Server
	mu   sync.Mutex
	keys []jose.JSONWebKey
	mux  *http.ServeMux
	// discovery are more fields of the discovery document (see NewLogin).
	discovery   map[string]any
	hits        atomic.Int32
	jwksFetches atomic.Int32
}

// New starts an Issuer that is closed when the test ends.
func New(t testing.TB) *Issuer {
	t.Helper()
	i := Start()
	t.Cleanup(i.Close)
	return i
}

// Start starts an Issuer outside a test (TestMain); the caller closes it.
func Start() *Issuer {
	mux := http.NewServeMux()
	i := &Issuer{mux: mux, discovery: map[string]any{}}
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		doc := map[string]any{
			"issuer":                                i.URL,
			"jwks_uri":                              i.URL + "/keys",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		}
		i.mu.Lock()
		for k, v := range i.discovery {
			doc[k] = v
		}
		i.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		i.jwksFetches.Add(1)
		i.mu.Lock()
		defer i.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: i.keys})
	})
	i.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i.hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	return i
}

// Publish adds the public half of key to the JWKS under kid.
func (i *Issuer) Publish(key crypto.Signer, kid string, alg jose.SignatureAlgorithm) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = append(i.keys, jose.JSONWebKey{Key: key.Public(), KeyID: kid, Algorithm: string(alg), Use: "sig"})
}

// Hits counts every request the issuer has answered.
func (i *Issuer) Hits() int { return int(i.hits.Load()) }

// JWKSFetches counts requests for the JWKS.
func (i *Issuer) JWKSFetches() int { return int(i.jwksFetches.Load()) }

// Sign makes a compact JWS of claims signed with key (a private key or
// anything go-jose signs with) under kid and alg.
func Sign(key any, kid string, alg jose.SignatureAlgorithm, claims map[string]any) (string, error) {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", fmt.Errorf("creating signer: %w", err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("encoding claims: %w", err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	return jws.CompactSerialize()
}

// MustSign is Sign that fails the test on error.
func MustSign(t testing.TB, key any, kid string, alg jose.SignatureAlgorithm, claims map[string]any) string {
	t.Helper()
	tok, err := Sign(key, kid, alg, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Unsigned makes an "alg: none" token of claims, which a verifier must
// never accept.
func Unsigned(claims map[string]any) string {
	enc := base64.RawURLEncoding
	payload, _ := json.Marshal(claims) // claims of JSON values always encode
	return enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString(payload) + "."
}
