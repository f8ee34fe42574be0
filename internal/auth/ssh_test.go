package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/sshsig/sshsigtest"
)

// TestSSH signs requests with keys made by ssh-keygen and held by a real
// ssh-agent, sends them over HTTP, and authenticates them like the server.
func TestSSH(t *testing.T) {
	agent := sshsigtest.StartAgent(t)
	alicePath, alice := agent.Keygen("ed25519", "alice@laptop")
	bobPath, bob := agent.Keygen("ed25519", "bob@laptop")
	evePath, eve := agent.Keygen("ed25519", "eve@laptop")
	for _, p := range []string{alicePath, bobPath, evePath} {
		agent.Add(p)
	}
	aliceSigner, bobSigner, eveSigner := agent.Signer(alice), agent.Signer(bob), agent.Signer(eve)

	pol := newPolicy("developers", "",
		kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{alice, bob, "not a key"}}},
		allowIf("comment", "alice@laptop", "dev-*"),
	)
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS, SSHAudience: testAudience})
	if a.Audience() != testAudience {
		t.Fatalf("Audience() = %q", a.Audience())
	}
	srv := authServer(t, a)

	type result struct {
		code int
		text string
		p    Principal
	}
	send := func(method, path, header string, body []byte) result {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", header)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		out, _ := io.ReadAll(resp.Body)
		r := result{code: resp.StatusCode, text: string(out)}
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(out, &r.p); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	sign := func(s ssh.Signer, method, path string, body []byte, at time.Time) string {
		t.Helper()
		return signFor(t, s, testAudience, srv.URL, method, path, body, at)
	}
	body := []byte(`{"pool":"dev-small","ttl":"30m"}`)

	hdr := sign(aliceSigner, "POST", "/v1/leases", body, time.Now())
	got := send("POST", "/v1/leases", hdr, body)
	if got.code != http.StatusOK {
		t.Fatalf("signed request: %d %s", got.code, got.text)
	}
	if got.p.Identity != "alice@laptop" || got.p.Method != MethodSSH || got.p.Policy != "developers" || !(&got.p).AllowsPool("dev-small") {
		t.Fatalf("principal %+v", got.p)
	}

	for _, tc := range []struct {
		name   string
		method string
		path   string
		header string
		body   []byte
		code   int
		detail string
	}{
		{"replayed signature", "POST", "/v1/leases", hdr, body, 401, "already used"},
		{"tampered path", "POST", "/v1/leases/lease-victim",
			sign(aliceSigner, "POST", "/v1/leases", body, time.Now()), body, 401, "does not match"},
		{"tampered body", "POST", "/v1/leases",
			sign(aliceSigner, "POST", "/v1/leases", body, time.Now()), []byte(`{"pool":"prod"}`), 401, "does not match"},
		{"timestamp too old", "POST", "/v1/leases",
			sign(aliceSigner, "POST", "/v1/leases", body, time.Now().Add(-2*time.Minute)), body, 401, "window"},
		{"timestamp in the future", "POST", "/v1/leases",
			sign(aliceSigner, "POST", "/v1/leases", body, time.Now().Add(2*time.Minute)), body, 401, "window"},
		{"timestamp 45s old (the window is 30s)", "POST", "/v1/leases",
			sign(aliceSigner, "POST", "/v1/leases", body, time.Now().Add(-45*time.Second)), body, 401, "window"},
		{"signed for another kobe installation", "POST", "/v1/leases",
			signFor(t, aliceSigner, "kobe:ns:kobe-system:staging", srv.URL, "POST", "/v1/leases", body, time.Now()), body, 401, "signed for audience \"kobe:ns:kobe-system:staging\""},
		{"key not in authorizedKeys", "POST", "/v1/leases",
			sign(eveSigner, "POST", "/v1/leases", body, time.Now()), body, 401, "SSH key " + ssh.FingerprintSHA256(eveSigner.PublicKey()) + " is not authorised"},
		{"authorised key, no rule", "POST", "/v1/leases",
			sign(bobSigner, "POST", "/v1/leases", body, time.Now()), body, 403, `no rule of policy developers matches "bob@laptop"`},
		{"garbage header", "GET", "/v1/leases", "KobeSSH v=1,key=x", nil, 401, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := send(tc.method, tc.path, tc.header, tc.body)
			if got.code != tc.code || !strings.Contains(got.text, tc.detail) {
				t.Fatalf("got %d %q; want %d containing %q", got.code, got.text, tc.code, tc.detail)
			}
		})
	}
}

// signFor signs method url+path with body for audience at the time at.
func signFor(t *testing.T, s ssh.Signer, audience, url, method, path string, body []byte, at time.Time) string {
	t.Helper()
	req, err := http.NewRequest(method, url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := sshsig.SignRequest(req, body, s, audience, at); err != nil {
		t.Fatal(err)
	}
	return req.Header.Get("Authorization")
}

// TestSSHWithoutAudience: a server configured without an audience refuses
// every SSH signature, whatever audience it names, and says why.
func TestSSHWithoutAudience(t *testing.T) {
	agent := sshsigtest.StartAgent(t)
	path, pub := agent.Keygen("ed25519", "alice@laptop")
	agent.Add(path)
	pol := newPolicy("developers", "", kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{pub}}}, allow("*"))
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS})
	if a.Audience() != "" {
		t.Fatalf("Audience() = %q, want empty", a.Audience())
	}
	hdr := signFor(t, agent.Signer(pub), testAudience, "http://kobe.test", "GET", "/v1/leases", nil, time.Now())
	if p, err := authenticate(t, a, hdr); !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("got %+v, %v; want ErrInvalidCredentials saying SSH is not configured", p, err)
	}
}

// brokenNonces fails like an API server that forbids the write.
type brokenNonces struct{}

func (brokenNonces) Claim(context.Context, string, time.Time) error {
	return errors.New(`leases.coordination.k8s.io is forbidden: User "system:serviceaccount:kobe-system:kobe" cannot create`)
}

// TestSSHNonceStoreFailure: when the nonce cannot be recorded the request
// is refused, and the caller is not shown the API server's error.
func TestSSHNonceStoreFailure(t *testing.T) {
	agent := sshsigtest.StartAgent(t)
	path, pub := agent.Keygen("ed25519", "alice@laptop")
	agent.Add(path)
	pol := newPolicy("developers", "", kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{pub}}}, allow("*"))
	a := NewAuthenticator(Options{Reader: storeReader(t, pol), Namespace: testNS, SSHAudience: testAudience, SSHNonces: brokenNonces{}})
	hdr := signFor(t, agent.Signer(pub), testAudience, "http://kobe.test", "GET", "/v1/leases", nil, time.Now())
	p, err := authenticate(t, a, hdr)
	if !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), "could not record") {
		t.Fatalf("got %+v, %v; want refused because the nonce could not be recorded", p, err)
	}
	if strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the caller sees the API server's error: %v", err)
	}
}
