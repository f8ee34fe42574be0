package sshsig

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// FuzzParseHeader feeds arbitrary Authorization values to the parser: it
// must never panic, must only fail with ErrMalformed, and what it accepts
// must render back to a header that parses to the same values.
func FuzzParseHeader(f *testing.F) {
	seed := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	s, err := ssh.NewSignerFromKey(seed)
	if err != nil {
		f.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/v1/leases", nil)
	if err := SignRequest(req, []byte("{}"), s, "kobe-fuzz", time.Unix(1775736000, 0)); err != nil {
		f.Fatal(err)
	}
	good := req.Header.Get("Authorization")
	f.Add(good)
	f.Add("KobeSSH v=2")
	f.Add("KobeSSH v=2,key=,ts=1,nonce=,aud=,sig=")
	f.Add("Bearer abc.def.ghi")
	f.Add("KobeSSH ,,,")

	v, err := NewVerifier(VerifierOptions{Audience: "kobe-fuzz", Now: func() time.Time { return time.Unix(1775736000, 0) }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value string) {
		h, err := ParseHeader(value)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		again, err := ParseHeader(h.String())
		if err != nil {
			t.Fatalf("rendered header does not parse: %v", err)
		}
		if again.KeyText != h.KeyText || again.Nonce != h.Nonce || again.Timestamp != h.Timestamp || again.Audience != h.Audience ||
			again.Signature.Format != h.Signature.Format || string(again.Signature.Blob) != string(h.Signature.Blob) {
			t.Fatal("round trip changed the header")
		}
		// Verification of anything parsed must not panic either.
		_ = v.Verify(context.Background(), httptest.NewRequest("POST", "/v1/leases", nil), []byte("{}"), h)
	})
}
