// Package sshsigtest runs a real ssh-agent with keys made by ssh-keygen, for
// tests that sign kobe requests the way the CLI does. Only tests import it.
package sshsigtest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// Agent is a running ssh-agent.
type Agent struct {
	// Socket is the agent's SSH_AUTH_SOCK.
	Socket string
	dir    string
	t      testing.TB
}

// StartAgent starts `ssh-agent -D` on a fresh socket and stops it when the
// test ends. It fails the test when ssh-agent is not installed.
func StartAgent(t testing.TB) *Agent {
	t.Helper()
	bin, err := exec.LookPath("ssh-agent")
	if err != nil {
		t.Fatalf("ssh-agent not found (apt-get install openssh-client): %v", err)
	}
	// Unix socket paths are limited to ~104 bytes, so not t.TempDir().
	dir, err := os.MkdirTemp("", "kobe-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	cmd := exec.Command(bin, "-D", "-a", sock)
	cmd.Stderr = os.Stderr // stdout only repeats the socket path
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting ssh-agent: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ssh-agent did not listen on %s: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &Agent{Socket: sock, dir: dir, t: t}
}

// Keygen makes a key with `ssh-keygen -t keyType` (e.g. "ed25519",
// "ecdsa", "rsa") and comment, and returns the private key file's path and
// the authorized_keys line of its public half.
func (a *Agent) Keygen(keyType, comment string) (path, authorizedKey string) {
	a.t.Helper()
	path = filepath.Join(a.dir, strings.NewReplacer("/", "_", " ", "_").Replace(comment)+"-"+keyType)
	out, err := exec.Command("ssh-keygen", "-q", "-t", keyType, "-N", "", "-C", comment, "-f", path).CombinedOutput()
	if err != nil {
		a.t.Fatalf("ssh-keygen -t %s: %v: %s", keyType, err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		a.t.Fatal(err)
	}
	return path, strings.TrimSpace(string(pub))
}

// Add loads a private key file into the agent with ssh-add.
func (a *Agent) Add(path string) {
	a.t.Helper()
	cmd := exec.Command("ssh-add", "-q", path)
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+a.Socket)
	if out, err := cmd.CombinedOutput(); err != nil {
		a.t.Fatalf("ssh-add %s: %v: %s", path, err, out)
	}
}

// Signer returns the agent's signer for the public key in authorizedKey,
// talking to the agent over its socket like the CLI does.
func (a *Agent) Signer(authorizedKey string) ssh.Signer {
	a.t.Helper()
	want, _, _, _, err := ssh.ParseAuthorizedKey([]byte(authorizedKey))
	if err != nil {
		a.t.Fatal(err)
	}
	conn, err := net.Dial("unix", a.Socket)
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { _ = conn.Close() })
	signers, err := agent.NewClient(conn).Signers()
	if err != nil {
		a.t.Fatal(err)
	}
	for _, s := range signers {
		if string(s.PublicKey().Marshal()) == string(want.Marshal()) {
			return s
		}
	}
	a.t.Fatalf("agent holds no key %s", ssh.FingerprintSHA256(want))
	return nil
}
