//go:build integration

package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/login"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	loginClientID = "kobe-cli"
	loginEmail    = "alice@example.com"
)

// loginCLI runs the real kobe binary with a config folder of its own.
type loginCLI struct {
	bin, home string
}

func newLoginCLI(t *testing.T) *loginCLI {
	t.Helper()
	dir := t.TempDir()
	if err := testenv.BuildCommands(dir, "kobe"); err != nil {
		t.Fatal(err)
	}
	return &loginCLI{bin: filepath.Join(dir, "kobe"), home: filepath.Join(dir, "home")}
}

func (c *loginCLI) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	// No browser here (no DISPLAY) and none of the caller's kobe settings.
	cmd.Env = []string{"HOME=" + c.home, "KOBE_CONFIG=" + filepath.Join(c.home, "kobe", "config.yaml"), "PATH=" + os.Getenv("PATH")}
	return cmd
}

func (c *loginCLI) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := c.command(ctx, args...).CombinedOutput()
	return string(out), err
}

func (c *loginCLI) loginFile(endpoint string) string {
	return filepath.Join(c.home, "kobe", "logins", strings.TrimPrefix(endpoint, "http://")+".json")
}

func (c *loginCLI) stored(t *testing.T, endpoint string) login.Token {
	t.Helper()
	data, err := os.ReadFile(c.loginFile(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	var tok login.Token
	if err := json.Unmarshal(data, &tok); err != nil {
		t.Fatal(err)
	}
	return tok
}

var userCode = regexp.MustCompile(`enter the code (\S+)`)

// loginInTerminal runs `kobe login --device` args in a pseudo-terminal
// and plays the person: decide approves or denies the code it prints at
// the issuer. It returns the terminal's text and the exit error.
func (c *loginCLI) loginInTerminal(t *testing.T, decide func(code string) error, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := c.command(ctx, append([]string{"login", "--device"}, args...)...)
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	term := &testenv.Output{}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(term, tty)
		close(copied)
	}()
	var code string
	testenv.Eventually(t, 30*time.Second, "kobe login to show a user code", func() error {
		m := userCode.FindStringSubmatch(term.String())
		if m == nil {
			return fmt.Errorf("terminal so far: %q", term.String())
		}
		code = m[1]
		return nil
	})
	if err := decide(code); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	_ = tty.Close()
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	return term.String(), err
}

// TestKobeLogin logs a person in with the real CLI in a terminal against a
// real API server that publishes a test issuer's login: the device flow,
// the stored token (0600) used by whoami and lease, its refresh when it
// expires, and logout's revocation. It also checks what must be refused:
// tokens of another issuer or audience, a login redirected to another
// issuer by a changed discovery, which must never receive the stored
// tokens.
func TestKobeLogin(t *testing.T) {
	ctx := t.Context()
	iss := oidcissuer.NewLogin(t, loginClientID)
	iss.SetClaims(map[string]any{"sub": "alice-sub", "email": loginEmail})
	pol := policy("people", "{email}",
		kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: iss.URL, Audience: []string{loginClientID}}},
		kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: "email", Value: loginEmail}, Pools: []string{"dev"}})
	if err := fx.env.Client.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fx.env.Client.Delete(context.WithoutCancel(ctx), pol); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting policy people: %v", err)
		}
	})
	publish := func(i *oidcissuer.Login) func(*apiserver.Options) {
		return func(o *apiserver.Options) {
			o.Login = &wire.LoginDiscovery{Issuer: i.URL, ClientID: loginClientID, Scopes: []string{"openid", "email", "offline_access"}}
		}
	}
	endpoint := startServer(t, auth.Options{}, publish(iss))
	eventually(t, "policy people in the cache", func(context.Context) bool {
		r, err := roundTrip(prepareAt(t, endpoint, apiclient.BearerToken(iss.IDToken(t, loginClientID)), "/v1/whoami"))
		return err == nil && r.code == http.StatusOK
	})
	cli := newLoginCLI(t)

	// ID tokens of 20 s: refreshed from 10 s before their expiry on.
	iss.SetTTL(20 * time.Second)
	out, err := cli.loginInTerminal(t, iss.Approve, "--endpoint", endpoint)
	if err != nil {
		t.Fatalf("kobe login --device: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Logged in to "+endpoint+" as "+loginEmail) {
		t.Fatalf("kobe login printed:\n%s", out)
	}
	first := cli.stored(t, endpoint)
	for path, want := range map[string]os.FileMode{cli.loginFile(endpoint): 0o600, filepath.Dir(cli.loginFile(endpoint)): 0o700} {
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v; want %v", path, err, info.Mode().Perm(), want)
		}
	}
	config, err := os.ReadFile(filepath.Join(cli.home, "kobe", "config.yaml"))
	if err != nil || !strings.Contains(string(config), "auth: login") || strings.Contains(string(config), first.RefreshToken) {
		t.Errorf("config after login (auth login, no token in it): %v\n%s", err, config)
	}

	if out, err := cli.run(t, "whoami"); err != nil || !strings.Contains(out, "as "+loginEmail) {
		t.Fatalf("kobe whoami with the stored login: %v\n%s", err, out)
	}
	out, err = cli.run(t, "lease", "dev", "-o", "json")
	var l wire.Lease
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || l.Phase != "Bound" {
		t.Fatalf("kobe lease dev with the stored login: %v\n%s", err, out)
	}
	if out, err := cli.run(t, "release", l.ID); err != nil {
		t.Fatalf("kobe release: %v\n%s", err, out)
	}
	if n := iss.Refreshes(); n != 0 {
		t.Fatalf("%d refreshes while the ID token was fresh", n)
	}

	t.Run("an expiring ID token is refreshed and the refresh kept", func(t *testing.T) {
		iss.SetTTL(time.Hour)
		time.Sleep(time.Until(first.Expiry.Add(-login.RefreshBefore)))
		if out, err := cli.run(t, "whoami"); err != nil || !strings.Contains(out, "as "+loginEmail) {
			t.Fatalf("kobe whoami with an expiring login: %v\n%s", err, out)
		}
		next := cli.stored(t, endpoint)
		if iss.Refreshes() != 1 || next.IDToken == first.IDToken || next.RefreshToken == first.RefreshToken || !next.Expiry.After(first.Expiry) {
			t.Fatalf("after expiry: %d refreshes, stored token changed %v, refresh token rotated %v", iss.Refreshes(), next.IDToken != first.IDToken, next.RefreshToken != first.RefreshToken)
		}
		if info, err := os.Stat(cli.loginFile(endpoint)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("refreshed login file: %v %v", err, info)
		}
		if out, err := cli.run(t, "whoami"); err != nil || iss.Refreshes() != 1 {
			t.Fatalf("a fresh token was refreshed again: %v, %d refreshes\n%s", err, iss.Refreshes(), out)
		}
	})

	t.Run("tokens of another audience or issuer are refused", func(t *testing.T) {
		other := oidcissuer.NewLogin(t, loginClientID)
		other.SetClaims(map[string]any{"sub": "alice-sub", "email": loginEmail})
		for name, tok := range map[string]string{
			"another audience": iss.IDToken(t, "someone-else"),
			"another issuer":   other.IDToken(t, loginClientID),
		} {
			r, err := roundTrip(prepareAt(t, endpoint, apiclient.BearerToken(tok), "/v1/whoami"))
			if err != nil || r.code != http.StatusUnauthorized {
				t.Errorf("%s: %v %v, want 401", name, r, err)
			}
		}
	})

	t.Run("a discovery naming another issuer never gets the stored tokens", func(t *testing.T) {
		evil := oidcissuer.NewLogin(t, loginClientID)
		evilEndpoint := startServer(t, auth.Options{}, publish(evil))
		stored := cli.stored(t, endpoint)
		// The context's endpoint now answers with another issuer.
		out, err := cli.loginInTerminal(t, evil.Deny, "--context", strings.TrimPrefix(endpoint, "http://"), "--endpoint", evilEndpoint)
		if err == nil || !strings.Contains(out, "denied") {
			t.Fatalf("login denied at the other issuer: %v\n%s", err, out)
		}
		for what, secret := range map[string]string{"refresh token": stored.RefreshToken, "ID token": stored.IDToken} {
			if evil.Received(secret) {
				t.Errorf("the other issuer received the stored %s", what)
			}
		}
		if evil.BearersSeen() != 0 || iss.BearersSeen() != 0 {
			t.Errorf("bearer tokens sent to issuers: %d, %d", evil.BearersSeen(), iss.BearersSeen())
		}
		if after := cli.stored(t, endpoint); after.IDToken != stored.IDToken || after.RefreshToken != stored.RefreshToken {
			t.Errorf("a failed login changed the stored one")
		}
		// Put the endpoint back for logout.
		if out, err := cli.run(t, "config", "set", strings.TrimPrefix(endpoint, "http://"), "--endpoint", endpoint); err != nil {
			t.Fatalf("kobe config set: %v\n%s", err, out)
		}
	})

	t.Run("logout revokes and forgets", func(t *testing.T) {
		stored := cli.stored(t, endpoint)
		out, err := cli.run(t, "logout")
		if err != nil || !strings.Contains(out, "refresh token revoked at "+iss.URL) {
			t.Fatalf("kobe logout: %v\n%s", err, out)
		}
		if iss.RefreshTokenLive(stored.RefreshToken) {
			t.Error("the refresh token is still live at the issuer")
		}
		if _, err := os.Stat(cli.loginFile(endpoint)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("login file after logout: %v", err)
		}
		if out, err := cli.run(t, "whoami"); err == nil || !strings.Contains(out, "is not logged in: run `kobe login") {
			t.Errorf("whoami after logout: %v\n%s", err, out)
		}
	})
}

// prepareAt is a GET of path at base with creds.
func prepareAt(t *testing.T, base string, creds apiclient.Credentials, path string) *http.Request {
	t.Helper()
	req := prepare(t, creds, http.MethodGet, path, nil)
	req.URL.Host = strings.TrimPrefix(base, "http://")
	return req
}
