package sshsig

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

var t0 = time.Date(2026, 4, 9, 12, 0, 0, 0, time.UTC)

// testAudience is the audience of the servers in these tests.
const testAudience = "kobe:ns:kobe-system:8d3f0c52"

// newVerifier is NewVerifier for testAudience unless o names another.
func newVerifier(t *testing.T, o VerifierOptions) *Verifier {
	t.Helper()
	if o.Audience == "" {
		o.Audience = testAudience
	}
	v, err := NewVerifier(o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newSigner(t *testing.T, kind string) ssh.Signer {
	t.Helper()
	var key any
	var err error
	switch kind {
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case "ecdsa":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "rsa":
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serverRequest turns a client request into what a server handler sees.
func serverRequest(t *testing.T, method, target string, body []byte, header string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	r.Header.Set("Authorization", header)
	return r
}

func signed(t *testing.T, s ssh.Signer, method, url string, body []byte, at time.Time) string {
	t.Helper()
	return signedFor(t, s, testAudience, method, url, body, at)
}

func signedFor(t *testing.T, s ssh.Signer, audience, method, url string, body []byte, at time.Time) string {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := SignRequest(req, body, s, audience, at); err != nil {
		t.Fatal(err)
	}
	return req.Header.Get("Authorization")
}

func verify(v *Verifier, r *http.Request, body []byte) error {
	h, err := ParseHeader(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	return v.Verify(context.Background(), r, body, h)
}

func TestSignVerifyKeyTypes(t *testing.T) {
	for _, kind := range []string{"ed25519", "ecdsa", "rsa"} {
		t.Run(kind, func(t *testing.T) {
			s := newSigner(t, kind)
			body := []byte(`{"pool":"ci-small","ttl":"30m"}`)
			hdr := signed(t, s, "POST", "https://kobe.example.com/v1/leases?wait=1", body, t0)
			h, err := ParseHeader(hdr)
			if err != nil {
				t.Fatal(err)
			}
			if kind == "rsa" && h.Signature.Format != ssh.KeyAlgoRSASHA256 {
				t.Fatalf("RSA signed with %s, want rsa-sha2-256", h.Signature.Format)
			}
			if h.Fingerprint() != ssh.FingerprintSHA256(s.PublicKey()) {
				t.Fatal("fingerprint differs")
			}
			v := newVerifier(t, VerifierOptions{Now: func() time.Time { return t0.Add(30 * time.Second) }})
			if err := verify(v, serverRequest(t, "POST", "/v1/leases?wait=1", body, hdr), body); err != nil {
				t.Fatalf("verify: %v", err)
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	s := newSigner(t, "ed25519")
	body := []byte(`{"pool":"ci-small"}`)
	hdr := signed(t, s, "POST", "http://h/v1/leases", body, t0)
	at := func(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

	cases := []struct {
		name   string
		now    func() time.Time
		method string
		target string
		body   []byte
		want   error
	}{
		{"ok", at(0), "POST", "/v1/leases", body, nil},
		{"edge of window", at(30 * time.Second), "POST", "/v1/leases", body, nil},
		{"too old", at(31 * time.Second), "POST", "/v1/leases", body, ErrClockSkew},
		{"from the future", at(-31 * time.Second), "POST", "/v1/leases", body, ErrClockSkew},
		{"other method", at(0), "PUT", "/v1/leases", body, ErrBadSignature},
		{"tampered path", at(0), "POST", "/v1/leases/lease-x", body, ErrBadSignature},
		{"added query", at(0), "POST", "/v1/leases?x=1", body, ErrBadSignature},
		{"tampered body", at(0), "POST", "/v1/leases", []byte(`{"pool":"ci-big"}`), ErrBadSignature},
		{"no body", at(0), "POST", "/v1/leases", nil, ErrBadSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerifier(t, VerifierOptions{Now: tc.now})
			err := verify(v, serverRequest(t, tc.method, tc.target, tc.body, hdr), tc.body)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	s := newSigner(t, "ed25519")
	now := t0
	clock := func() time.Time { return now }
	store := NewMemoryNonceStore(0, clock)
	v := newVerifier(t, VerifierOptions{Now: clock, Nonces: store})
	hdr := signed(t, s, "GET", "http://h/v1/leases", nil, t0)
	if err := verify(v, serverRequest(t, "GET", "/v1/leases", nil, hdr), nil); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(29 * time.Second)
	if err := verify(v, serverRequest(t, "GET", "/v1/leases", nil, hdr), nil); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replay: got %v", err)
	}
	// Another signature of the same request has a new nonce and passes.
	hdr2 := signed(t, s, "GET", "http://h/v1/leases", nil, now)
	if err := verify(v, serverRequest(t, "GET", "/v1/leases", nil, hdr2), nil); err != nil {
		t.Fatal(err)
	}
	// Once the first signature left the window it is refused by the clock,
	// and its nonce is swept away.
	now = t0.Add(3 * time.Minute)
	if err := verify(v, serverRequest(t, "GET", "/v1/leases", nil, hdr), nil); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("late replay: got %v", err)
	}
	hdr3 := signed(t, s, "GET", "http://h/v1/leases", nil, now)
	if err := verify(v, serverRequest(t, "GET", "/v1/leases", nil, hdr3), nil); err != nil {
		t.Fatal(err)
	}
	if n := store.Len(); n != 1 {
		t.Fatalf("replay cache holds %d nonces, want 1 after the sweep", n)
	}
}

func TestReplayCacheBounded(t *testing.T) {
	s := newSigner(t, "ed25519")
	now := t0
	clock := func() time.Time { return now }
	v := newVerifier(t, VerifierOptions{Nonces: NewMemoryNonceStore(3, clock), Now: clock})
	for i := range 3 {
		hdr := signed(t, s, "GET", "http://h/v1/pools", nil, now)
		if err := verify(v, serverRequest(t, "GET", "/v1/pools", nil, hdr), nil); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	hdr := signed(t, s, "GET", "http://h/v1/pools", nil, now)
	if err := verify(v, serverRequest(t, "GET", "/v1/pools", nil, hdr), nil); !errors.Is(err, ErrBusy) {
		t.Fatalf("full cache: got %v, want ErrBusy", err)
	}
	now = t0.Add(2 * time.Minute)
	hdr = signed(t, s, "GET", "http://h/v1/pools", nil, now)
	if err := verify(v, serverRequest(t, "GET", "/v1/pools", nil, hdr), nil); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

func TestParseHeaderRefuses(t *testing.T) {
	s := newSigner(t, "ed25519")
	good := signed(t, s, "GET", "http://h/", nil, t0)
	h, err := ParseHeader(good)
	if err != nil {
		t.Fatal(err)
	}
	if h.String() != good {
		t.Fatalf("String() = %q, want %q", h.String(), good)
	}
	replace := func(old, repl string) string { return strings.Replace(good, old, repl, 1) }

	rsaSigner := newSigner(t, "rsa")
	sha1Sig, err := rsaSigner.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, []byte("x"), ssh.KeyAlgoRSA)
	if err != nil {
		t.Fatal(err)
	}
	sha1 := &Header{Key: rsaSigner.PublicKey(), KeyText: encode(rsaSigner.PublicKey().Marshal()), Timestamp: 1, Nonce: h.Nonce, Audience: testAudience, Signature: sha1Sig}
	mismatch := &Header{Key: rsaSigner.PublicKey(), KeyText: encode(rsaSigner.PublicKey().Marshal()), Timestamp: 1, Nonce: h.Nonce, Audience: testAudience, Signature: h.Signature}

	for name, value := range map[string]string{
		"empty":              "",
		"bearer":             "Bearer abc",
		"no params":          "KobeSSH",
		"version 1":          replace("v=2", "v=1"),
		"version 3":          replace("v=2", "v=3"),
		"repeated":           good + ",v=2",
		"missing aud":        replace(",aud="+encode([]byte(testAudience)), ""),
		"empty aud":          replace("aud="+encode([]byte(testAudience)), "aud="),
		"aud not base64":     replace("aud="+encode([]byte(testAudience)), "aud=a+b"),
		"aud with a newline": replace("aud="+encode([]byte(testAudience)), "aud="+encode([]byte("kobe\nPOST"))),
		"aud too long":       replace("aud="+encode([]byte(testAudience)), "aud="+encode([]byte(strings.Repeat("a", MaxAudienceLen+1)))),
		"unknown":            good + ",x=1",
		"missing sig":        good[:strings.Index(good, ",sig=")],
		"bad ts":             replace("ts=", "ts=+"),
		"zero ts":            strings.Replace(good, "ts="+strconv.FormatInt(h.Timestamp, 10), "ts=0", 1),
		"short nonce":        replace("nonce="+h.Nonce, "nonce=AAAA"),
		"padded nonce":       replace("nonce="+h.Nonce, "nonce="+h.Nonce+"=="),
		"bad key":            replace("key="+h.KeyText, "key=AAAA"),
		"ssh-rsa sha1":       sha1.String(),
		"format mismatch":    mismatch.String(),
		"too long":           good + strings.Repeat(" ", MaxHeaderLen),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseHeader(value); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
	// Spaces after commas and a lower-case scheme are fine.
	if _, err := ParseHeader("kobessh " + strings.ReplaceAll(strings.TrimPrefix(good, "KobeSSH "), ",", ", ")); err != nil {
		t.Fatalf("spaced header: %v", err)
	}
	if !HasScheme(good) || HasScheme("Bearer x") {
		t.Fatal("HasScheme")
	}
}

func TestTarget(t *testing.T) {
	for raw, want := range map[string]string{
		"http://h":                  "/",
		"http://h/":                 "/",
		"http://h/v1/leases":        "/v1/leases",
		"http://h/v1/pools?a=1&b=2": "/v1/pools?a=1&b=2",
		"http://h/a%2Fb":            "/a%2Fb",
	} {
		req, err := http.NewRequest("GET", raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := Target(req.URL); got != want {
			t.Errorf("Target(%s) = %q, want %q", raw, got, want)
		}
	}
	// The server sees the same target as the client for an escaped path.
	if got := Target(httptest.NewRequest("GET", "/a%2Fb", nil).URL); got != "/a%2Fb" {
		t.Errorf("server target %q", got)
	}
}

// TestAudience: a signature names the server it is for; another server
// refuses it, and rewriting the audience in the header breaks the signature.
func TestAudience(t *testing.T) {
	s := newSigner(t, "ed25519")
	body := []byte(`{"pool":"ci-small"}`)
	v := newVerifier(t, VerifierOptions{Now: func() time.Time { return t0 }})

	forOther := signedFor(t, s, "kobe:ns:kobe-system:staging", "POST", "http://h/v1/leases", body, t0)
	err := verify(v, serverRequest(t, "POST", "/v1/leases", body, forOther), body)
	if !errors.Is(err, ErrWrongAudience) || !strings.Contains(err.Error(), testAudience) || !strings.Contains(err.Error(), "staging") {
		t.Fatalf("signature for another audience: got %v, want ErrWrongAudience naming both", err)
	}

	// A relaying server rewrites aud to its victim's audience: the header
	// now names the right server, but the signature covers the old one.
	relabelled := strings.Replace(forOther, "aud="+encode([]byte("kobe:ns:kobe-system:staging")), "aud="+encode([]byte(testAudience)), 1)
	if relabelled == forOther {
		t.Fatal("test did not rewrite aud")
	}
	if err := verify(v, serverRequest(t, "POST", "/v1/leases", body, relabelled), body); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("rewritten aud: got %v, want ErrBadSignature", err)
	}

	// The refusals consumed no nonce: the genuine request still passes once.
	good := signed(t, s, "POST", "http://h/v1/leases", body, t0)
	if err := verify(v, serverRequest(t, "POST", "/v1/leases", body, good), body); err != nil {
		t.Fatal(err)
	}

	for _, aud := range []string{"", "tab\there", strings.Repeat("x", MaxAudienceLen+1), "naïve"} {
		if _, err := NewVerifier(VerifierOptions{Audience: aud}); err == nil {
			t.Errorf("NewVerifier accepted audience %q", aud)
		}
		req := httptest.NewRequest("GET", "/", nil)
		if err := SignRequest(req, nil, s, aud, t0); err == nil {
			t.Errorf("SignRequest accepted audience %q", aud)
		}
	}
}

// failingStore is a NonceStore that cannot answer, like an API server that
// is down.
type failingStore struct{}

func (failingStore) Claim(context.Context, string, time.Time) error {
	return errors.New("connection refused")
}

// TestNonceStoreFailureRefuses: when the store cannot record the nonce the
// request is refused (fail closed), not accepted unrecorded.
func TestNonceStoreFailureRefuses(t *testing.T) {
	s := newSigner(t, "ed25519")
	v := newVerifier(t, VerifierOptions{Now: func() time.Time { return t0 }, Nonces: failingStore{}})
	hdr := signed(t, s, "GET", "http://h/v1/leases", nil, t0)
	if err := verify(v, serverRequest(t, "GET", "/v1/leases", nil, hdr), nil); !errors.Is(err, ErrNonceStore) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v, want ErrNonceStore wrapping the cause", err)
	}
}

// TestNonceExpiry: a nonce outlives the last instant at which any server
// whose clock lags the forgetting server's by up to skew still accepts its
// signature; by default skew is the window.
func TestNonceExpiry(t *testing.T) {
	cases := []struct {
		name          string
		window, skew  time.Duration
		wantAfterSign time.Duration
	}{
		{"default window, default skew", DefaultWindow, DefaultWindow, 61 * time.Second},
		{"no skew", DefaultWindow, 0, 31 * time.Second},
		{"negative skew counts as none", DefaultWindow, -time.Minute, 31 * time.Second},
		{"short window, long skew", 5 * time.Second, time.Minute, 66 * time.Second},
		{"long window", 2 * time.Minute, 2 * time.Minute, 241 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NonceExpiry(t0, tc.window, tc.skew)
			if want := t0.Add(tc.wantAfterSign); !got.Equal(want) {
				t.Fatalf("NonceExpiry = ts+%s, want ts+%s", got.Sub(t0), tc.wantAfterSign)
			}
			// The last instant a server lagging by lag accepts the
			// signature, read on the forgetting server's clock.
			for _, lag := range []time.Duration{0, tc.skew / 2, tc.skew} {
				if last := t0.Add(tc.window + max(lag, 0)); !last.Before(got) {
					t.Errorf("lag %s: accepted until ts+%s, forgotten at ts+%s", lag, last.Sub(t0), got.Sub(t0))
				}
			}
		})
	}
}

// TestVerifierKeepsNoncesForLaggingReplicas: the expiry a Verifier asks
// its store for covers a replica lagging by the window (or by MaxSkew).
func TestVerifierKeepsNoncesForLaggingReplicas(t *testing.T) {
	s := newSigner(t, "ed25519")
	for _, tc := range []struct {
		skew time.Duration
		want time.Duration
	}{{0, 61 * time.Second}, {5 * time.Second, 36 * time.Second}} {
		store := &recordingStore{}
		v := newVerifier(t, VerifierOptions{Now: func() time.Time { return t0 }, Nonces: store, MaxSkew: tc.skew})
		hdr := signed(t, s, "GET", "http://h/v1/leases", nil, t0)
		if err := verify(v, serverRequest(t, "GET", "/v1/leases", nil, hdr), nil); err != nil {
			t.Fatal(err)
		}
		if got := store.expires.Sub(t0); got != tc.want {
			t.Errorf("MaxSkew %s: nonce kept until ts+%s, want ts+%s", tc.skew, got, tc.want)
		}
	}
}

type recordingStore struct{ expires time.Time }

func (s *recordingStore) Claim(_ context.Context, _ string, expires time.Time) error {
	s.expires = expires
	return nil
}
