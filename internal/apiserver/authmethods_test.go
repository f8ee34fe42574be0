//go:build integration

package apiserver_test

import (
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/sshsig/sshsigtest"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestOIDC leases with ID tokens of a local issuer (discovery and JWKS
// served by the test, tokens signed with a real RSA key) and shows that
// every kind of bad token is refused with a JSON 401, a token whose claims
// no rule matches with a 403, and that no refused request leaves a lease.
func TestOIDC(t *testing.T) {
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// A real issuer that no policy trusts, with its own published key.
	fx.foreign.Publish(otherKey, oidcKID, jose.RS256)

	now := time.Now()
	claims := func(edit func(map[string]any)) map[string]any {
		c := map[string]any{
			"iss":              fx.issuer.URL,
			"aud":              oidcAudience,
			"sub":              "repo:my-org/my-repo:ref:refs/heads/main",
			"repository":       "my-org/my-repo",
			"repository_owner": "my-org",
			"ref":              "refs/heads/main",
			"iat":              now.Unix(),
			"nbf":              now.Add(-time.Minute).Unix(),
			"exp":              now.Add(10 * time.Minute).Unix(),
		}
		if edit != nil {
			edit(c)
		}
		return c
	}
	sign := func(edit func(map[string]any)) string {
		return oidcissuer.MustSign(t, fx.oidcKey, oidcKID, jose.RS256, claims(edit))
	}

	t.Run("valid token leases", func(t *testing.T) {
		l := createLease(t, apiclient.BearerToken(sign(nil)), "ci-small", "10m")
		const identity = "my-org/my-repo:refs/heads/main"
		if l.Requester != identity {
			t.Fatalf("answer shows requester %q, want %q", l.Requester, identity)
		}
		obj := leaseObject(t, l.ID)
		want := kobev1.Requester{Identity: identity, Policy: "github-ci", Method: auth.MethodOIDC}
		if obj.Spec.Requester != want {
			t.Fatalf("lease %s requester %+v, want %+v", l.ID, obj.Spec.Requester, want)
		}
		if obj.Status.Phase != kobev1.LeaseBound || obj.Status.InstanceRef == nil || obj.Status.InstanceRef.Name != l.ClusterName {
			t.Fatalf("lease %s object is %s bound to %v; the answer said Bound to %s", l.ID, obj.Status.Phase, obj.Status.InstanceRef, l.ClusterName)
		}
	})

	for _, tc := range []struct {
		name    string
		token   string
		code    int
		errText string
		detail  string
	}{
		{"expired", sign(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now.Add(-time.Hour).Unix(), now.Add(-time.Hour).Unix(), now.Add(-5*time.Minute).Unix()
		}), http.StatusUnauthorized, "invalid credentials", "expired"},
		{"not yet valid", sign(func(c map[string]any) {
			c["nbf"], c["exp"] = now.Add(5*time.Minute).Unix(), now.Add(time.Hour).Unix()
		}), http.StatusUnauthorized, "invalid credentials", "not valid yet"},
		{"wrong audience", sign(func(c map[string]any) { c["aud"] = "someone-else" }),
			http.StatusUnauthorized, "invalid credentials", "audience"},
		// Only ServiceAccount and token policies look at it; the issuer
		// the token names is never contacted (see below).
		{"issuer no policy trusts", oidcissuer.MustSign(t, otherKey, oidcKID, jose.RS256, claims(func(c map[string]any) { c["iss"] = fx.foreign.URL })),
			http.StatusUnauthorized, "invalid credentials", "ServiceAccount token not accepted"},
		{"bad signature (known kid, other key)", oidcissuer.MustSign(t, otherKey, oidcKID, jose.RS256, claims(nil)),
			http.StatusUnauthorized, "invalid credentials", "does not verify"},
		{"alg none", oidcissuer.Unsigned(claims(nil)),
			http.StatusUnauthorized, "invalid credentials", "does not verify"},
		{"unknown key id", oidcissuer.MustSign(t, otherKey, "rsa-never-published", jose.RS256, claims(nil)),
			http.StatusUnauthorized, "invalid credentials", "does not verify"},
		{"claims match no rule", sign(func(c map[string]any) {
			c["repository"], c["repository_owner"] = "evil-org/repo", "evil-org"
		}), http.StatusForbidden, "not authorised", `no rule of policy github-ci matches "evil-org/repo:refs/heads/main"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := leaseObjects(t)
			r := call(t, apiclient.BearerToken(tc.token), http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "ci-small", TTL: "10m"})
			e := requireError(t, r, tc.code, tc.errText, tc.detail)
			if payload := strings.Split(tc.token, ".")[1]; strings.Contains(e.Detail, payload) {
				t.Fatalf("the error detail echoes the token: %q", e.Detail)
			}
			if tc.code == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
			requireNoNewLease(t, before)
		})
	}
	// The server fetched discovery and keys only from the issuer a policy
	// names, never from the one an unverified token claims.
	if n := fx.foreign.Hits(); n != 0 {
		t.Fatalf("the untrusted issuer named in a token was contacted %d times", n)
	}
}

// TestSSH leases with requests signed by a real ssh-agent holding an
// ssh-keygen Ed25519 key, through apiclient's SSHAgent credentials (what
// the CLI sends), and shows that a replayed, a redirected, an altered and
// an unauthorised signature are 401 and change nothing.
func TestSSH(t *testing.T) {
	agent := sshsigtest.StartAgent(t)
	agent.Add(fx.sshKeyPath)
	evePath, eveKey := agent.Keygen("ed25519", "eve@laptop")
	agent.Add(evePath)
	alice := apiclient.SSHAgent{Socket: agent.Socket, KeyFilter: fx.sshAuthorizedKey, Audience: sshAudience}
	eve := apiclient.SSHAgent{Socket: agent.Socket, KeyFilter: eveKey, Audience: sshAudience}
	// The same key signing for another kobe installation.
	aliceElsewhere := apiclient.SSHAgent{Socket: agent.Socket, KeyFilter: fx.sshAuthorizedKey, Audience: "kobe:ns:default:another-installation"}
	body := []byte(`{"pool":"dev","ttl":"20m"}`)

	// The first signed request leases; the very same request sent again
	// (same Authorization header, same body) is a replay.
	signed, _ := newRequest(t, http.MethodPost, "/v1/leases", body)
	if err := alice.Apply(signed, body); err != nil {
		t.Fatal(err)
	}
	l := decode[wire.Lease](t, send(t, signed), http.StatusCreated)
	if l.Phase != wire.PhaseBound || l.Kubeconfig == "" || l.Requester != aliceComment {
		t.Fatalf("signed request: lease %+v", l)
	}
	obj := recordedLease(t, l.ID)
	if want := (kobev1.Requester{Identity: aliceComment, Policy: "developers", Method: auth.MethodSSH}); obj.Spec.Requester != want {
		t.Fatalf("lease %s requester %+v, want %+v", l.ID, obj.Spec.Requester, want)
	}

	t.Run("apiclient lists the lease", func(t *testing.T) {
		c, err := apiclient.New(fx.url, alice)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.ListLeases(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != l.ID {
			t.Fatalf("alice's leases %+v, want just %s", got, l.ID)
		}
	})

	signFor := func(creds apiclient.SSHAgent, method, path string, body []byte) string {
		t.Helper()
		req, _ := newRequest(t, method, path, body)
		if err := creds.Apply(req, body); err != nil {
			t.Fatal(err)
		}
		return req.Header.Get("Authorization")
	}
	for _, tc := range []struct {
		name   string
		method string
		path   string
		header string
		body   []byte
		detail string
	}{
		{"replayed request", http.MethodPost, "/v1/leases", signed.Header.Get("Authorization"), body, "already used"},
		{"key not in authorizedKeys", http.MethodPost, "/v1/leases", signFor(eve, http.MethodPost, "/v1/leases", body), body, "is not authorised"},
		{"signed for another installation", http.MethodPost, "/v1/leases", signFor(aliceElsewhere, http.MethodPost, "/v1/leases", body), body, "signature is for another server"},
		// A signature for releasing some other lease, sent to release alice's.
		{"tampered path", http.MethodDelete, "/v1/leases/" + l.ID, signFor(alice, http.MethodDelete, "/v1/leases/lease-000000000000", nil), nil, "does not match"},
		{"tampered body", http.MethodPost, "/v1/leases", signFor(alice, http.MethodPost, "/v1/leases", body), []byte(`{"pool":"dev","ttl":"24h"}`), "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := leaseObjects(t)
			req, _ := newRequest(t, tc.method, tc.path, tc.body)
			req.Header.Set("Authorization", tc.header)
			requireError(t, send(t, req), http.StatusUnauthorized, "invalid credentials", tc.detail)
			requireNoNewLease(t, before)
			requireBoundUntouched(t, l.ID, obj)
		})
	}
}

// TestServiceAccount leases with a TokenRequest token of ServiceAccount
// ci-runner, reviewed by the real API server, and shows that another
// ServiceAccount's token (authenticated, matched by no rule) is a 403 and a
// token for another audience a 401, neither leaving a lease.
func TestServiceAccount(t *testing.T) {
	token := func(sa, audience string) apiclient.BearerToken {
		t.Helper()
		tr, err := fx.kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for %s: %v", sa, err)
		}
		return apiclient.BearerToken(tr.Status.Token)
	}

	t.Run("ci-runner leases", func(t *testing.T) {
		l := createLease(t, token("ci-runner", saAudience), "ci-small", "")
		const identity = "system:serviceaccount:" + ns + ":ci-runner"
		obj := leaseObject(t, l.ID)
		if want := (kobev1.Requester{Identity: identity, Policy: "in-cluster", Method: auth.MethodServiceAccount}); obj.Spec.Requester != want {
			t.Fatalf("lease %s requester %+v, want %+v", l.ID, obj.Spec.Requester, want)
		}
	})
	for _, tc := range []struct {
		name    string
		token   apiclient.BearerToken
		code    int
		errText string
		detail  string
	}{
		{"another ServiceAccount", token("intruder", saAudience), http.StatusForbidden, "not authorised",
			`no rule of policy in-cluster matches "system:serviceaccount:` + ns + `:intruder"`},
		{"token for another audience", token("ci-runner", "someone-else"), http.StatusUnauthorized, "invalid credentials", "ServiceAccount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := leaseObjects(t)
			r := call(t, tc.token, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "ci-small"})
			requireError(t, r, tc.code, tc.errText, tc.detail)
			requireNoNewLease(t, before)
		})
	}
}
