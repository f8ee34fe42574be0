package sshsig_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/sshsig/sshsigtest"
)

// TestRealAgent signs with keys made by ssh-keygen and held by a running
// ssh-agent, the way the CLI signs, and verifies like the server.
func TestRealAgent(t *testing.T) {
	a := sshsigtest.StartAgent(t)
	for _, kind := range []string{"ed25519", "ecdsa", "rsa"} {
		t.Run(kind, func(t *testing.T) {
			path, pub := a.Keygen(kind, "ci@"+kind)
			a.Add(path)
			signer := a.Signer(pub)

			body := []byte(`{"pool":"ci-small"}`)
			req, err := http.NewRequest("POST", "http://kobe.test/v1/leases", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if err := sshsig.SignRequest(req, body, signer, "kobe-test", now); err != nil {
				t.Fatal(err)
			}
			hdr := req.Header.Get("Authorization")

			v, err := sshsig.NewVerifier(sshsig.VerifierOptions{Audience: "kobe-test", Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			check := func(target string, b []byte) error {
				r := httptest.NewRequest("POST", target, bytes.NewReader(b))
				r.Header.Set("Authorization", hdr)
				h, err := sshsig.ParseHeader(r.Header.Get("Authorization"))
				if err != nil {
					return err
				}
				return v.Verify(context.Background(), r, b, h)
			}
			if err := check("/v1/leases/other", body); !errors.Is(err, sshsig.ErrBadSignature) {
				t.Fatalf("tampered path: %v", err)
			}
			if err := check("/v1/leases", body); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if err := check("/v1/leases", body); !errors.Is(err, sshsig.ErrReplayed) {
				t.Fatalf("replay: %v", err)
			}
		})
	}
}
