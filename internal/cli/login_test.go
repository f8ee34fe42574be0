package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/login"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const testClientID = "kobe-cli"

// loginServer is the Go client's fake API behind a front that publishes
// iss's login and admits the ID tokens iss signs for the client (as an
// AccessPolicy trusting it would), naming the caller by their email.
func loginServer(t *testing.T, iss *oidcissuer.Login) string {
	t.Helper()
	return loginServerAccepting(t, iss, testClientID)
}

// loginServerAccepting is loginServer admitting ID tokens for audience
// aud only.
func loginServerAccepting(t *testing.T, iss *oidcissuer.Login, aud string) string {
	t.Helper()
	fake := apiclienttest.New(t)
	provider, err := oidc.NewProvider(t.Context(), iss.URL)
	if err != nil {
		t.Fatal(err)
	}
	verifier := provider.Verifier(&oidc.Config{ClientID: aud})
	fake.Authenticate = func(r *http.Request, _ []byte) (string, bool) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return "", false
		}
		tok, err := verifier.Verify(r.Context(), raw)
		var claims struct {
			Email string `json:"email"`
		}
		if err != nil || tok.Claims(&claims) != nil {
			return "", false
		}
		return claims.Email, true
	}
	backend, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.LoginDiscoveryPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(wire.LoginDiscovery{Issuer: iss.URL, ClientID: testClientID, Scopes: []string{"openid", "email", "offline_access"}})
	})
	mux.Handle("/", httputil.NewSingleHostReverseProxy(backend))
	front := httptest.NewServer(mux)
	t.Cleanup(front.Close)
	return front.URL
}

// withBrowser makes this machine one with a browser, which the test
// plays: it follows the issuer's redirects back to kobe's listener.
func withBrowser(t *testing.T) {
	t.Helper()
	open, available := openBrowser, browserAvailable
	t.Cleanup(func() { openBrowser, browserAvailable = open, available })
	browserAvailable = func(func(string) string) bool { return true }
	openBrowser = func(u string) error {
		go func() {
			if resp, err := http.Get(u); err == nil {
				_ = resp.Body.Close()
			}
		}()
		return nil
	}
}

func readLogin(t *testing.T, path string) *login.Token {
	t.Helper()
	tok, err := loadLogin(path)
	if err != nil || tok == nil {
		t.Fatalf("login at %s: %v %v", path, tok, err)
	}
	return tok
}

// TestLoginKeepsATokenPerContext: kobe login --endpoint (the browser flow
// by default where a browser can open) makes a context named after the
// host, keeps its login 0600 beside the config, and the commands use it;
// a second login of another context is kept apart.
func TestLoginKeepsATokenPerContext(t *testing.T) {
	e := newTestEnv(t)
	withBrowser(t)
	iss := oidcissuer.NewLogin(t, testClientID)
	endpoint := loginServer(t, iss)
	host := strings.TrimPrefix(endpoint, "http://")

	r := mustKobe(t, "login", "--endpoint", endpoint)
	if !strings.Contains(r.stdout, "Logged in to "+endpoint+" as alice@example.com (context "+host) || !strings.Contains(r.stderr, "Opening your browser") {
		t.Fatalf("login: %s", r)
	}
	path := loginPath(e.config, host)
	if mode := fileMode(t, path); mode != 0o600 {
		t.Errorf("login file mode %04o, want 0600", mode)
	}
	if mode := fileMode(t, filepath.Dir(path)); mode != 0o700 {
		t.Errorf("logins folder mode %04o, want 0700", mode)
	}
	cfg, err := LoadConfig(e.config)
	if err != nil || cfg.CurrentContext != host || cfg.Context(host).Auth != AuthLogin || cfg.Context(host).Token != "" {
		t.Fatalf("config after login: %+v %v", cfg, err)
	}
	alice := readLogin(t, path)
	if r := mustKobe(t, "whoami"); !strings.Contains(r.stdout, "as alice@example.com") {
		t.Errorf("whoami: %s", r)
	}

	bob := oidcissuer.NewLogin(t, testClientID)
	bob.SetClaims(map[string]any{"sub": "bob", "email": "bob@example.com"})
	other := loginServer(t, bob)
	mustKobe(t, "login", "--context", "other", "--endpoint", other)
	if r := mustKobe(t, "whoami", "--context", "other"); !strings.Contains(r.stdout, "as bob@example.com") {
		t.Errorf("whoami --context other: %s", r)
	}
	if r := mustKobe(t, "whoami"); !strings.Contains(r.stdout, "as alice@example.com") {
		t.Errorf("the current context changed with a login of another: %s", r)
	}
	if after := readLogin(t, path); after.IDToken != alice.IDToken || readLogin(t, loginPath(e.config, "other")).Issuer != bob.URL {
		t.Error("the logins of two contexts are not kept apart")
	}
}

// TestLoginRefreshIsWrittenBack: an expired ID token is renewed with the
// refresh token before the request, and the renewal replaces the kept
// login (0600); logout then revokes the new refresh token.
func TestLoginRefreshIsWrittenBack(t *testing.T) {
	e := newTestEnv(t)
	withBrowser(t)
	iss := oidcissuer.NewLogin(t, testClientID)
	endpoint := loginServer(t, iss)
	mustKobe(t, "login", "--endpoint", endpoint)
	path := loginPath(e.config, strings.TrimPrefix(endpoint, "http://"))
	tok := readLogin(t, path)
	tok.Expiry = time.Now().Add(-time.Minute)
	if err := saveLogin(path, tok); err != nil {
		t.Fatal(err)
	}

	mustKobe(t, "pools")
	next := readLogin(t, path)
	if iss.Refreshes() != 1 || next.IDToken == tok.IDToken || next.RefreshToken == tok.RefreshToken || !next.Expiry.After(time.Now()) {
		t.Fatalf("%d refreshes; kept login renewed: %v", iss.Refreshes(), next.IDToken != tok.IDToken)
	}
	if mode := fileMode(t, path); mode != 0o600 {
		t.Errorf("renewed login file mode %04o", mode)
	}

	r := mustKobe(t, "logout")
	if !strings.Contains(r.stdout, "refresh token revoked at "+iss.URL) || iss.RefreshTokenLive(next.RefreshToken) {
		t.Errorf("logout: %s", r)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("login file after logout: %v", err)
	}
	r = kobe(t, "pools")
	if r.code != 1 || !strings.Contains(r.stderr, "is not logged in: run `kobe login --context") {
		t.Errorf("pools after logout: %s", r)
	}
	if r := mustKobe(t, "logout"); !strings.Contains(r.stdout, "holds no login") {
		t.Errorf("second logout: %s", r)
	}
}

// TestLogoutOffline: without the issuer, logout forgets the login all the
// same and says that the refresh token stays valid there.
func TestLogoutOffline(t *testing.T) {
	e := newTestEnv(t)
	withBrowser(t)
	iss := oidcissuer.NewLogin(t, testClientID)
	endpoint := loginServer(t, iss)
	mustKobe(t, "login", "--endpoint", endpoint)
	iss.Close()
	r := mustKobe(t, "logout")
	if !strings.Contains(r.stderr, "could not revoke the refresh token") || !strings.Contains(r.stderr, "stays valid at "+iss.URL) ||
		!strings.Contains(r.stdout, "forgotten here") {
		t.Errorf("offline logout: %s", r)
	}
	if _, err := os.Stat(loginPath(e.config, strings.TrimPrefix(endpoint, "http://"))); !os.IsNotExist(err) {
		t.Errorf("login file after offline logout: %v", err)
	}
}

// TestLoginErrorsSayWhatHappened: the messages of failed logins.
func TestLoginErrorsSayWhatHappened(t *testing.T) {
	withBrowser(t)
	t.Run("issuer unreachable", func(t *testing.T) {
		newTestEnv(t)
		iss := oidcissuer.NewLogin(t, testClientID)
		endpoint := loginServer(t, iss)
		iss.Close()
		r := kobe(t, "login", "--endpoint", endpoint)
		if r.code != 1 || !strings.Contains(r.stderr, "discovering the OIDC issuer "+iss.URL) {
			t.Errorf("unreachable issuer: %s", r)
		}
	})
	t.Run("denied", func(t *testing.T) {
		newTestEnv(t)
		iss := oidcissuer.NewLogin(t, testClientID)
		iss.DenyAuthorize(true)
		r := kobe(t, "login", "--endpoint", loginServer(t, iss))
		if r.code != 1 || !strings.Contains(r.stderr, "the login was denied at the issuer") {
			t.Errorf("denied: %s", r)
		}
	})
	t.Run("server refuses the token", func(t *testing.T) {
		newTestEnv(t)
		iss := oidcissuer.NewLogin(t, testClientID)
		// No policy trusts the published client as an audience.
		r := kobe(t, "login", "--endpoint", loginServerAccepting(t, iss, "another-client"))
		if r.code != 1 || !strings.Contains(r.stderr, "refuses the ID token: an AccessPolicy of method oidc must trust issuer "+iss.URL+" with audience "+testClientID) {
			t.Errorf("token refused by the server: %s", r)
		}
	})
	t.Run("both flows", func(t *testing.T) {
		newTestEnv(t)
		if r := kobe(t, "login", "--device", "--browser"); r.code != 1 || !strings.Contains(r.stderr, "give --device or --browser, not both") {
			t.Errorf("both flows: %s", r)
		}
	})
}

func TestHasLocalBrowser(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	if hasLocalBrowser(env("DISPLAY", ":0", "SSH_CONNECTION", "1.2.3.4 1 5.6.7.8 22")) {
		t.Error("a browser over SSH")
	}
	if hasLocalBrowser(env("SSH_TTY", "/dev/pts/1", "WAYLAND_DISPLAY", "wayland-0")) {
		t.Error("a browser over SSH")
	}
	if got := hasLocalBrowser(env("DISPLAY", ":0")); !got && runtime.GOOS == "linux" {
		t.Error("no browser in a graphical session")
	}
}
