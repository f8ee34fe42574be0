package apiclienttest

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

// WithSSHKeys makes the fake accept KobeSSH-signed requests (verified with
// internal/sshsig for the fake's SSHAudience, read at each request) from the
// keys in identities, a map from SHA256 fingerprint to identity, instead of
// bearer tokens.
func WithSSHKeys(identities map[string]string) Option {
	return func(s *Server) {
		nonces := sshsig.NewMemoryNonceStore(0, nil)
		s.Authenticate = func(r *http.Request, body []byte) (string, bool) {
			h, err := sshsig.ParseHeader(r.Header.Get("Authorization"))
			if err != nil {
				return "", false
			}
			id, ok := identities[h.Fingerprint()]
			if !ok {
				return "", false
			}
			v, err := sshsig.NewVerifier(sshsig.VerifierOptions{Audience: s.SSHAudience, Nonces: nonces})
			if err != nil || v.Verify(r.Context(), r, body, h) != nil {
				return "", false
			}
			return id, true
		}
	}
}

// SSHAgent is an in-memory SSH agent served on a Unix socket.
type SSHAgent struct {
	// Socket is the agent's SSH_AUTH_SOCK.
	Socket  string
	keyring agent.Agent
}

// StartSSHAgent serves an empty keyring until the test ends.
func StartSSHAgent(t testing.TB) *SSHAgent {
	t.Helper()
	// Unix socket paths are limited to ~104 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "kobe-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	a := &SSHAgent{Socket: filepath.Join(dir, "agent.sock"), keyring: agent.NewKeyring()}
	l, err := net.Listen("unix", a.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				_ = agent.ServeAgent(a.keyring, conn)
			}()
		}
	}()
	return a
}

// Add puts a private key (ed25519.PrivateKey, *ecdsa.PrivateKey,
// *rsa.PrivateKey) into the agent and returns its public half.
func (a *SSHAgent) Add(t testing.TB, priv any, comment string) ssh.PublicKey {
	t.Helper()
	if err := a.keyring.Add(agent.AddedKey{PrivateKey: priv, Comment: comment}); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer.PublicKey()
}
