package apiclient

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

// SSHAgent signs every request with a key held by an SSH agent, in the
// KobeSSH scheme of internal/sshsig. The agent is asked afresh for each
// request, so keys added or removed with ssh-add take effect at once.
type SSHAgent struct {
	// Socket is the agent's Unix socket; $SSH_AUTH_SOCK when empty.
	Socket string
	// KeyFilter picks the agent key to sign with:
	//   - a fingerprint such as "SHA256:uX1b...";
	//   - an authorized_keys line ("ssh-ed25519 AAAA... comment");
	//   - the path of a public key file, or of a private key file with its
	//     .pub beside it ("~/.ssh/id_ed25519");
	//   - otherwise the key's comment.
	// Empty means the agent's only key (an error when it holds several).
	KeyFilter string
	// Audience is the server's audience, as it publishes it in GET
	// /v1/status (Client.Status, Status.Auth.Audience). Pin it on first use
	// and keep signing for the pinned value: a server that announces
	// another one may be relaying your requests elsewhere. Required.
	Audience string
}

// Apply signs req and body with the chosen agent key for Audience.
func (a SSHAgent) Apply(req *http.Request, body []byte) error {
	return a.ApplySum(req, sha256.Sum256(body))
}

// ApplySum signs req and a streamed body known by its SHA-256.
func (a SSHAgent) ApplySum(req *http.Request, bodySum [sha256.Size]byte) error {
	if a.Audience == "" {
		return errors.New("no SSH audience to sign for: set SSHAgent.Audience to the audience the server publishes in GET /v1/status, pinned on first use")
	}
	socket := a.Socket
	if socket == "" {
		socket = os.Getenv("SSH_AUTH_SOCK")
	}
	if socket == "" {
		return errors.New("no SSH agent: SSH_AUTH_SOCK is not set; start one with `eval $(ssh-agent)` and add your key with ssh-add")
	}
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return fmt.Errorf("connecting to the SSH agent at %s: %w", socket, err)
	}
	defer func() { _ = conn.Close() }()
	signer, err := a.signer(agent.NewClient(conn))
	if err != nil {
		return err
	}
	return sshsig.SignRequestSum(req, bodySum, signer, a.Audience, time.Now())
}

// signer returns the agent's signer for the key KeyFilter picks.
func (a SSHAgent) signer(ag agent.Agent) (ssh.Signer, error) {
	keys, err := ag.List()
	if err != nil {
		return nil, fmt.Errorf("listing the SSH agent's keys: %w", err)
	}
	if len(keys) == 0 {
		return nil, errors.New("the SSH agent holds no keys: add yours with ssh-add (e.g. ssh-add ~/.ssh/id_ed25519)")
	}
	key, err := a.pick(keys)
	if err != nil {
		return nil, err
	}
	signers, err := ag.Signers()
	if err != nil {
		return nil, fmt.Errorf("getting the SSH agent's signers: %w", err)
	}
	for _, s := range signers {
		if bytes.Equal(s.PublicKey().Marshal(), key.Marshal()) {
			return s, nil
		}
	}
	return nil, fmt.Errorf("the SSH agent no longer holds key %s", ssh.FingerprintSHA256(key))
}

// pick chooses one of the agent's keys by KeyFilter.
func (a SSHAgent) pick(keys []*agent.Key) (*agent.Key, error) {
	filter := strings.TrimSpace(a.KeyFilter)
	if filter == "" {
		if len(keys) == 1 {
			return keys[0], nil
		}
		return nil, fmt.Errorf("the SSH agent holds %d keys: choose one with --ssh-key (fingerprint, comment or .pub path): %s",
			len(keys), describeKeys(keys))
	}
	match, err := keyMatcher(filter)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if match(k) {
			return k, nil
		}
	}
	return nil, fmt.Errorf("no key in the SSH agent matches %q; it holds: %s", filter, describeKeys(keys))
}

// keyMatcher turns a KeyFilter into a predicate over agent keys.
func keyMatcher(filter string) (func(*agent.Key) bool, error) {
	if strings.HasPrefix(filter, "SHA256:") {
		return func(k *agent.Key) bool { return ssh.FingerprintSHA256(k) == filter }, nil
	}
	if pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(filter)); err == nil {
		return sameKey(pub), nil
	}
	if looksLikePath(filter) {
		pub, err := readPublicKey(filter)
		if err != nil {
			return nil, err
		}
		return sameKey(pub), nil
	}
	return func(k *agent.Key) bool { return k.Comment == filter }, nil
}

func sameKey(pub ssh.PublicKey) func(*agent.Key) bool {
	want := pub.Marshal()
	return func(k *agent.Key) bool { return bytes.Equal(k.Marshal(), want) }
}

func looksLikePath(s string) bool {
	if strings.ContainsRune(s, '/') || strings.ContainsRune(s, filepath.Separator) || strings.HasSuffix(s, ".pub") {
		return true
	}
	_, err := os.Stat(s)
	return err == nil
}

// readPublicKey reads a public key file, or the .pub beside a private key.
func readPublicKey(path string) (ssh.PublicKey, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("expanding %s: %w", path, err)
		}
		path = filepath.Join(home, rest)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the SSH public key to sign with: %w", err)
	}
	if pub, _, _, _, err := ssh.ParseAuthorizedKey(data); err == nil {
		return pub, nil
	}
	if strings.HasSuffix(path, ".pub") {
		return nil, fmt.Errorf("%s holds no SSH public key", path)
	}
	// A private key: use the public half beside it, as ssh -i does.
	if data, err := os.ReadFile(path + ".pub"); err == nil {
		if pub, _, _, _, err := ssh.ParseAuthorizedKey(data); err == nil {
			return pub, nil
		}
	}
	return nil, fmt.Errorf("%s is not a public key and %s.pub holds none: point --ssh-key at the .pub file or give the key's fingerprint", path, path)
}

// describeKeys lists keys as "SHA256:... (comment)" for error messages.
func describeKeys(keys []*agent.Key) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = ssh.FingerprintSHA256(k)
		if k.Comment != "" {
			parts[i] += " (" + k.Comment + ")"
		}
	}
	return strings.Join(parts, ", ")
}
