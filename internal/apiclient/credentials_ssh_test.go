package apiclient_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func sshServer(t *testing.T, identities map[string]string) *apiclienttest.Server {
	return apiclienttest.New(t, apiclienttest.WithSSHKeys(identities))
}

func TestSSHAgentSignsRequests(t *testing.T) {
	ag := apiclienttest.StartSSHAgent(t)
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub := ag.Add(t, edPriv, "alice@laptop")
	ecPub := ag.Add(t, ecPriv, "ci-key")

	dir := t.TempDir()
	privPath := filepath.Join(dir, "id_ed25519")
	block, err := ssh.MarshalPrivateKey(edPriv, "alice@laptop")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, privPath, string(pem.EncodeToMemory(block)))
	writeFile(t, privPath+".pub", string(ssh.MarshalAuthorizedKey(edPub)))
	ecPubPath := filepath.Join(dir, "ci.pub")
	writeFile(t, ecPubPath, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ecPub)))+" ci-key\n")

	srv := sshServer(t, map[string]string{
		ssh.FingerprintSHA256(edPub): "alice",
		ssh.FingerprintSHA256(ecPub): "ci",
	})

	tests := []struct {
		name, filter, wantIdentity, wantErr string
	}{
		{name: "fingerprint", filter: ssh.FingerprintSHA256(ecPub), wantIdentity: "ci"},
		{name: "comment", filter: "alice@laptop", wantIdentity: "alice"},
		{name: "public key file", filter: ecPubPath, wantIdentity: "ci"},
		{name: "private key file with .pub beside", filter: privPath, wantIdentity: "alice"},
		{name: "authorized_keys line", filter: string(ssh.MarshalAuthorizedKey(edPub)), wantIdentity: "alice"},
		{name: "several keys and no filter", filter: "", wantErr: "holds 2 keys: choose one with --ssh-key"},
		{name: "no match", filter: "bob@desktop", wantErr: `no key in the SSH agent matches "bob@desktop"; it holds: SHA256:`},
		{name: "unknown fingerprint", filter: "SHA256:AAAA", wantErr: "no key in the SSH agent matches"},
		{name: "missing file", filter: filepath.Join(dir, "missing.pub"), wantErr: "reading the SSH public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, srv.URL, apiclient.SSHAgent{Socket: ag.Socket, KeyFilter: tt.filter, Audience: apiclienttest.DefaultSSHAudience})
			// POST: the signature must cover the body too.
			l, err := c.CreateLease(t.Context(), wire.CreateLeaseRequest{Pool: "ci-small", TTL: "30m"})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Requester != tt.wantIdentity {
				t.Errorf("signed as %q, want %q", l.Requester, tt.wantIdentity)
			}
			// Every request carries a fresh nonce: a second one is no replay.
			if _, err := c.GetLease(t.Context(), l.ID); err != nil {
				t.Fatalf("second signed request: %v", err)
			}
		})
	}
}

func TestSSHAgentSingleKeyAndErrors(t *testing.T) {
	ag := apiclienttest.StartSSHAgent(t)
	srv := sshServer(t, nil)
	empty := newClient(t, srv.URL, apiclient.SSHAgent{Socket: ag.Socket, Audience: apiclienttest.DefaultSSHAudience})
	if _, err := empty.ListLeases(t.Context()); err == nil || !strings.Contains(err.Error(), "holds no keys: add yours with ssh-add") {
		t.Fatalf("empty agent: got %v", err)
	}

	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := ag.Add(t, priv, "only")
	srv = sshServer(t, map[string]string{ssh.FingerprintSHA256(pub): "only"})
	c := newClient(t, srv.URL, apiclient.SSHAgent{Socket: ag.Socket, Audience: apiclienttest.DefaultSSHAudience})
	who, err := c.WhoAmI(t.Context())
	if err != nil || who.Identity != "only" {
		t.Fatalf("the agent's only key is used without a filter: %+v %v", who, err)
	}

	t.Setenv("SSH_AUTH_SOCK", "")
	_, err = newClient(t, srv.URL, apiclient.SSHAgent{Audience: apiclienttest.DefaultSSHAudience}).ListLeases(t.Context())
	if err == nil || !strings.Contains(err.Error(), "SSH_AUTH_SOCK is not set") {
		t.Fatalf("no agent: got %v", err)
	}
	t.Setenv("SSH_AUTH_SOCK", ag.Socket)
	if _, err := newClient(t, srv.URL, apiclient.SSHAgent{Audience: apiclienttest.DefaultSSHAudience}).ListLeases(t.Context()); err != nil {
		t.Fatalf("SSH_AUTH_SOCK: %v", err)
	}

	gone := newClient(t, srv.URL, apiclient.SSHAgent{Socket: filepath.Join(t.TempDir(), "nope.sock"), Audience: apiclienttest.DefaultSSHAudience})
	_, err = gone.WaitBound(t.Context(), "lease-1", nil)
	if err == nil || !strings.Contains(err.Error(), "connecting to the SSH agent") {
		t.Fatalf("dead agent: got %v", err)
	}
	var apiErr *apiclient.Error
	if errors.As(err, &apiErr) {
		t.Errorf("credential failure reported as an API error: %v", err)
	}

	// No audience: nothing is signed, and the error says where to get one.
	if _, err := newClient(t, srv.URL, apiclient.SSHAgent{Socket: ag.Socket}).ListLeases(t.Context()); err == nil || !strings.Contains(err.Error(), "GET /v1/status") {
		t.Fatalf("no audience: got %v", err)
	}
	// A signature for another installation's audience is refused.
	other := newClient(t, srv.URL, apiclient.SSHAgent{Socket: ag.Socket, Audience: "kobe:another-installation"})
	if _, err := other.ListLeases(t.Context()); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("other audience: got %v, want 401", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
