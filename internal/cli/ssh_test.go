package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
)

// TestSSHAudiencePinning: the first SSH use pins the audience the server
// publishes; a server that later announces another one gets no signature
// until the user re-pins it, in a context or for a bare endpoint.
func TestSSHAudiencePinning(t *testing.T) {
	e := newTestEnv(t)
	ag := apiclienttest.StartSSHAgent(t)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := ag.Add(t, priv, "alice@laptop")
	srv := apiclienttest.New(t, apiclienttest.WithSSHKeys(map[string]string{ssh.FingerprintSHA256(pub): "alice"}))
	t.Setenv("SSH_AUTH_SOCK", ag.Socket)
	announce := func(audience string) {
		srv.Lock()
		defer srv.Unlock()
		srv.SSHAudience = audience
	}
	pinned := func() (inContext string, bare []PinnedAudience) {
		t.Helper()
		cfg, err := LoadConfig(e.config)
		if err != nil {
			t.Fatal(err)
		}
		if c := cfg.Context("dev"); c != nil {
			inContext = c.SSHAudience
		}
		return inContext, cfg.SSHAudiences
	}

	mustKobe(t, "config", "set", "dev", "--endpoint", srv.URL, "--auth", "ssh")
	r := mustKobe(t, "login")
	if !strings.Contains(r.stdout, "as alice") || !strings.Contains(r.stderr, `Pinned the SSH audience "kobe:fake"`) {
		t.Fatalf("first use: %s", r)
	}
	if got, _ := pinned(); got != "kobe:fake" {
		t.Fatalf("context pins %q, want kobe:fake", got)
	}
	r = mustKobe(t, "lease", "ci-small", "-o", "json")
	if strings.Contains(r.stderr, "Pinned") || !strings.Contains(r.stdout, `"requester": "alice"`) {
		t.Fatalf("second use signs for the pin, quietly: %s", r)
	}

	// The endpoint now announces another audience, as a server relaying
	// to another installation would.
	announce("kobe:ns:kobe-system:elsewhere")
	r = kobe(t, "login")
	for _, want := range []string{`announces SSH audience "kobe:ns:kobe-system:elsewhere"`, `"kobe:fake" was pinned`,
		`kobe config set dev --ssh-audience "kobe:ns:kobe-system:elsewhere"`} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Fatalf("changed audience: want exit 1 with %q: %s", want, r)
		}
	}
	if got, _ := pinned(); got != "kobe:fake" {
		t.Fatalf("a refused change rewrote the pin to %q", got)
	}

	// The user confirms the change and re-pins.
	mustKobe(t, "config", "set", "dev", "--ssh-audience", "kobe:ns:kobe-system:elsewhere")
	if r := mustKobe(t, "login"); !strings.Contains(r.stdout, "as alice") {
		t.Fatalf("after re-pinning: %s", r)
	}
	if r := kobe(t, "config", "set", "dev", "--ssh-audience", "bad\taudience"); r.code != 1 || !strings.Contains(r.stderr, "--ssh-audience") {
		t.Fatalf("invalid --ssh-audience: %s", r)
	}
	// A new endpoint forgets the old endpoint's pin.
	mustKobe(t, "config", "set", "dev", "--endpoint", srv.URL+"/")
	if got, _ := pinned(); got != "kobe:ns:kobe-system:elsewhere" {
		t.Fatalf("same endpoint with a slash dropped the pin: %q", got)
	}
	mustKobe(t, "config", "set", "dev", "--endpoint", "https://kobe.example.com")
	if got, _ := pinned(); got != "" {
		t.Fatalf("a new endpoint kept the old pin %q", got)
	}

	// A bare endpoint (no context of its own) is pinned under ssh-audiences.
	t.Setenv("KOBE_ENDPOINT", srv.URL)
	if r := mustKobe(t, "login", "--auth", "ssh"); !strings.Contains(r.stderr, "Pinned") {
		t.Fatalf("bare endpoint, first use: %s", r)
	}
	if _, bare := pinned(); len(bare) != 1 || bare[0].Endpoint != srv.URL || bare[0].Audience != "kobe:ns:kobe-system:elsewhere" {
		t.Fatalf("ssh-audiences %+v", bare)
	}
	announce("kobe:fake")
	if r := kobe(t, "login", "--auth", "ssh"); r.code != 1 || !strings.Contains(r.stderr, "under ssh-audiences") {
		t.Fatalf("bare endpoint, changed audience: %s", r)
	}

	// A server that publishes no audience gets no signature.
	announce("")
	if r := kobe(t, "login", "--auth", "ssh"); r.code != 1 || !strings.Contains(r.stderr, "publishes no SSH audience") {
		t.Fatalf("no audience: %s", r)
	}
}
