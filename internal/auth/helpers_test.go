package auth

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-jose/go-jose/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const testNS = "kobe-system"

func newPolicy(name, identity string, auth kobev1.AuthSpec, rules ...kobev1.AccessRule) *kobev1.AccessPolicy {
	return &kobev1.AccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec:       kobev1.AccessPolicySpec{Auth: auth, Identity: identity, Rules: rules},
	}
}

func allow(pools ...string) kobev1.AccessRule { return kobev1.AccessRule{Pools: pools} }

func allowIf(claim, value string, pools ...string) kobev1.AccessRule {
	return kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: claim, Value: value}, Pools: pools}
}

// storeReader is a Reader over a fixed set of objects: the tests here are
// about authentication logic, not about reading the API server (the
// apiserver_test.go tests do that against a real one).
func storeReader(t testing.TB, objs ...client.Object) client.Reader {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(objs...).Build()
}

// authServer serves every request through a.Authenticate like the API
// server will, answering the status code and the error or identity.
func authServer(t testing.TB, a *Authenticator) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p, err := a.Authenticate(r.Context(), r, body)
		switch {
		case errors.Is(err, ErrNoMatchingRule):
			http.Error(w, err.Error(), http.StatusForbidden)
		case err != nil:
			http.Error(w, err.Error(), http.StatusUnauthorized)
		default:
			_ = json.NewEncoder(w).Encode(p)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func authenticate(t testing.TB, a *Authenticator, header string) (*Principal, error) {
	t.Helper()
	r := httptest.NewRequest("GET", "/v1/leases", nil)
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	return a.Authenticate(context.Background(), r, nil)
}

// oidcIssuer is an OpenID provider: discovery and a JWKS that tests change.
type oidcIssuer struct {
	*httptest.Server
	mu          sync.Mutex
	keys        []jose.JSONWebKey
	jwksFetches atomic.Int32
}

func newIssuer(t testing.TB) *oidcIssuer {
	t.Helper()
	iss := &oidcIssuer{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                iss.URL,
			"jwks_uri":                              iss.URL + "/keys",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		iss.jwksFetches.Add(1)
		iss.mu.Lock()
		defer iss.mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: iss.keys})
	})
	iss.Server = httptest.NewServer(mux)
	t.Cleanup(iss.Close)
	return iss
}

// publish adds the public half of key to the JWKS under kid.
func (i *oidcIssuer) publish(key crypto.Signer, kid string, alg jose.SignatureAlgorithm) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = append(i.keys, jose.JSONWebKey{Key: key.Public(), KeyID: kid, Algorithm: string(alg), Use: "sig"})
}

// sign makes a compact JWS of claims with key, kid and alg.
func sign(t testing.TB, key any, kid string, alg jose.SignatureAlgorithm, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unsigned makes an "alg: none" token, which must never be accepted.
func unsigned(claims map[string]any) string {
	enc := base64.RawURLEncoding
	hdr := enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	payload, _ := json.Marshal(claims)
	return hdr + "." + enc.EncodeToString(payload) + "."
}
