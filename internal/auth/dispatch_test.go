package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

func TestPoliciesSideBySide(t *testing.T) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: testNS},
		Data:       map[string][]byte{"token": []byte("shared-token"), "other": []byte("other-token")},
	}
	tokenAuth := func(key string) kobev1.AuthSpec {
		return kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "shared", Key: key}}}
	}
	strict := newPolicy("a-strict", "", tokenAuth(""), allowIf("sub", "someone-else", "a"))
	open := newPolicy("b-open", "", tokenAuth(""), allow("b"))
	later := newPolicy("c-later", "", tokenAuth(""), allow("c"))
	otherKey := newPolicy("d-other-key", "", tokenAuth("other"), allow("d"))
	oidcPol := newPolicy("0-oidc", "", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: "http://127.0.0.1:1", Audience: []string{"x"}}}, allow("*"))
	sshPol := newPolicy("0-ssh", "", kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRmuvfsbh0/RgpTwpETIDbA45qwQAJXcPYrdFw8XO11 alice"}}}, allow("*"))

	cases := []struct {
		name     string
		objs     []client.Object
		header   string
		policy   string
		err      error
		detail   string
		wantPool string
	}{
		{"first by name with a matching rule wins", []client.Object{secret, later, open, strict, oidcPol, sshPol},
			"Bearer shared-token", "b-open", nil, "", "b"},
		{"another key of the same Secret", []client.Object{secret, open, otherKey},
			"Bearer other-token", "d-other-key", nil, "", "d"},
		{"authenticated, no rule anywhere", []client.Object{secret, strict},
			"Bearer shared-token", "", ErrNoMatchingRule, `no rule of policy a-strict matches "a-strict"`, ""},
		{"wrong token", []client.Object{secret, strict, open},
			"Bearer nope", "", ErrInvalidCredentials, "bearer token not accepted", ""},
		{"no policies", []client.Object{secret},
			"Bearer shared-token", "", ErrInvalidCredentials, "no access policy accepts this bearer token", ""},
		{"SSH signature without ssh policies", []client.Object{secret, open},
			sshHeader(t), "", ErrInvalidCredentials, "no access policy accepts SSH signatures", ""},
		{"malformed SSH signature", []client.Object{secret, sshPol},
			"KobeSSH v=2,key=AAAA,ts=1,nonce=AAAAAAAAAAAAAAAAAAAAAA,aud=a29iZQ,sig=AAAA", "", ErrInvalidCredentials, "malformed", ""},
		{"no header", []client.Object{secret, open}, "", "", ErrNoCredentials, "", ""},
		{"unknown scheme", []client.Object{secret, open}, "Digest x", "", ErrInvalidCredentials, "unsupported", ""},
		{"empty bearer", []client.Object{secret, open}, "Bearer   ", "", ErrInvalidCredentials, "empty", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAuthenticator(Options{Reader: storeReader(t, tc.objs...), Namespace: testNS})
			p, err := authenticate(t, a, tc.header)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.detail) {
					t.Fatalf("got %+v, %v; want %v with %q", p, err, tc.err, tc.detail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Policy != tc.policy || !p.AllowsPool(tc.wantPool) || p.Method != MethodToken {
				t.Fatalf("principal %+v", p)
			}
		})
	}

	a := NewAuthenticator(Options{Reader: storeReader(t, secret, open, oidcPol, sshPol), Namespace: testNS})
	if got, want := a.Methods(), []string{MethodOIDC, MethodSSH, MethodToken}; !slices.Equal(got, want) {
		t.Fatalf("Methods() = %v, want %v", got, want)
	}
}

func TestJWTRouting(t *testing.T) {
	cases := []struct {
		token  string
		jwt    bool
		issuer string
	}{
		{"opaque-token", false, ""},
		{"a.b", false, ""},
		{"a.b.c.d", false, ""},
		{".eyJpc3MiOiJ4In0.sig", false, ""},
		{"eyJhbGciOiJub25lIn0.eyJpc3MiOiJodHRwczovL2lzc3VlciJ9.", true, "https://issuer"},
		{"eyJhbGciOiJub25lIn0.eyJpc3MiOiJodHRwczovL2lzc3VlciJ9.c2ln", true, "https://issuer"},
		{"h.eyJpc3MiOjQyfQ.s", true, ""},    // iss is a number
		{"h.bm90IGpzb24.s", true, ""},       // payload is not JSON
		{"h.!!!.s", false, ""},              // not base64url
		{"h.eyJpc3MiOiJ4In0=.s", true, "x"}, // padded
	}
	for _, tc := range cases {
		jwt, iss := jwtIssuer(tc.token)
		if jwt != tc.jwt || iss != tc.issuer {
			t.Errorf("jwtIssuer(%q) = %v, %q; want %v, %q", tc.token, jwt, iss, tc.jwt, tc.issuer)
		}
	}
}

// sshHeader signs GET /v1/leases with a fresh in-process key.
func sshHeader(t *testing.T) string {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/leases", nil)
	if err := sshsig.SignRequest(r, nil, signer, testAudience, time.Now()); err != nil {
		t.Fatal(err)
	}
	return r.Header.Get("Authorization")
}
