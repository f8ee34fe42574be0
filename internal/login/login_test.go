package login_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/kunobi-ninja/kobe/internal/login"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
)

const clientID = "kobe-cli"

func discover(t *testing.T, iss *oidcissuer.Login) *login.Provider {
	t.Helper()
	p, err := login.Discover(t.Context(), http.DefaultClient, login.Config{Issuer: iss.URL, ClientID: clientID, Scopes: []string{"email", "offline_access"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// approveWhenPrompted approves (or denies) the device code shown to the
// person, as they would at the issuer's page.
func approveWhenPrompted(t *testing.T, iss *oidcissuer.Login, approve bool) func(*oauth2.DeviceAuthResponse) error {
	return func(da *oauth2.DeviceAuthResponse) error {
		if da.UserCode == "" || !strings.HasPrefix(da.VerificationURI, iss.URL) {
			t.Errorf("prompt shows %+v", da)
		}
		if approve {
			return iss.Approve(da.UserCode)
		}
		return iss.Deny(da.UserCode)
	}
}

func TestDeviceFlow(t *testing.T) {
	iss := oidcissuer.NewLogin(t, clientID)
	tok, err := discover(t, iss).Device(t.Context(), approveWhenPrompted(t, iss, true))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Issuer != iss.URL || tok.ClientID != clientID || tok.IDToken == "" || tok.RefreshToken == "" || time.Until(tok.Expiry) < 50*time.Minute {
		t.Fatalf("token %+v", tok)
	}
	if tok.Scopes[0] != "openid" {
		t.Errorf("scopes %v: openid must be asked for", tok.Scopes)
	}
	if n := iss.BearersSeen(); n != 0 {
		t.Errorf("%d requests to the issuer carried a bearer token", n)
	}
}

func TestDeviceFlowRefusals(t *testing.T) {
	t.Run("denied", func(t *testing.T) {
		iss := oidcissuer.NewLogin(t, clientID)
		_, err := discover(t, iss).Device(t.Context(), approveWhenPrompted(t, iss, false))
		if !errors.Is(err, login.ErrAccessDenied) || !strings.Contains(err.Error(), "denied") {
			t.Fatalf("denied device: %v, want ErrAccessDenied", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		iss := oidcissuer.NewLogin(t, clientID)
		iss.SetDeviceTTL(time.Second)
		_, err := discover(t, iss).Device(t.Context(), func(*oauth2.DeviceAuthResponse) error { return nil })
		if !errors.Is(err, login.ErrExpired) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("unapproved device: %v, want ErrExpired", err)
		}
	})
	t.Run("issuer unreachable", func(t *testing.T) {
		iss := oidcissuer.NewLogin(t, clientID)
		iss.Close()
		_, err := login.Discover(t.Context(), http.DefaultClient, login.Config{Issuer: iss.URL, ClientID: clientID})
		if err == nil || !strings.Contains(err.Error(), "discovering the OIDC issuer "+iss.URL) {
			t.Fatalf("closed issuer: %v", err)
		}
	})
	t.Run("plain http beyond loopback", func(t *testing.T) {
		_, err := login.Discover(t.Context(), http.DefaultClient, login.Config{Issuer: "http://idp.example.com", ClientID: clientID})
		if err == nil || !strings.Contains(err.Error(), "is not https://") {
			t.Fatalf("http issuer: %v", err)
		}
	})
	t.Run("unknown client", func(t *testing.T) {
		iss := oidcissuer.NewLogin(t, clientID)
		p, err := login.Discover(t.Context(), http.DefaultClient, login.Config{Issuer: iss.URL, ClientID: "someone-else"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Device(t.Context(), func(*oauth2.DeviceAuthResponse) error { return nil }); err == nil || !strings.Contains(err.Error(), "invalid_client") {
			t.Fatalf("unknown client: %v", err)
		}
	})
}

// browser plays the person's browser: it opens the authorize URL, takes
// the issuer's redirect, lets edit change it, and follows it to the
// loopback listener.
func browser(t *testing.T, edit func(*url.URL)) func(string) error {
	return func(authURL string) error {
		u, err := url.Parse(authURL)
		if err != nil {
			return err
		}
		q := u.Query()
		redirect, _ := url.Parse(q.Get("redirect_uri"))
		if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" || q.Get("nonce") == "" ||
			redirect == nil || redirect.Scheme != "http" || redirect.Hostname() != "127.0.0.1" {
			t.Errorf("authorize URL %s: want PKCE S256, state, nonce and a loopback redirect", authURL)
		}
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(authURL)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		back, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || resp.StatusCode != http.StatusFound {
			t.Fatalf("authorize answered %s, Location %q", resp.Status, resp.Header.Get("Location"))
		}
		edit(back)
		go func() {
			if resp, err := http.Get(back.String()); err == nil {
				_ = resp.Body.Close()
			}
		}()
		return nil
	}
}

func TestBrowserFlow(t *testing.T) {
	iss := oidcissuer.NewLogin(t, clientID)
	tok, err := discover(t, iss).Browser(t.Context(), browser(t, func(*url.URL) {}))
	if err != nil {
		t.Fatal(err)
	}
	if tok.IDToken == "" || tok.RefreshToken == "" || tok.Issuer != iss.URL {
		t.Fatalf("token %+v", tok)
	}

	t.Run("state mismatch", func(t *testing.T) {
		_, err := discover(t, iss).Browser(t.Context(), browser(t, func(u *url.URL) {
			q := u.Query()
			q.Set("state", q.Get("state")+"x")
			u.RawQuery = q.Encode()
		}))
		if !errors.Is(err, login.ErrStateMismatch) {
			t.Fatalf("tampered state: %v, want ErrStateMismatch", err)
		}
	})
	t.Run("denied", func(t *testing.T) {
		iss.DenyAuthorize(true)
		defer iss.DenyAuthorize(false)
		if _, err := discover(t, iss).Browser(t.Context(), browser(t, func(*url.URL) {})); !errors.Is(err, login.ErrAccessDenied) {
			t.Fatalf("denied: %v, want ErrAccessDenied", err)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if _, err := discover(t, iss).Browser(ctx, func(string) error { return nil }); err == nil || !strings.Contains(err.Error(), "waiting for the browser") {
			t.Fatalf("no browser: %v", err)
		}
	})
}

// TestIssuerRefusesWrongVerifier: the test issuer checks PKCE, so the
// browser flow's test proves the CLI sends the right verifier.
func TestIssuerRefusesWrongVerifier(t *testing.T) {
	iss := oidcissuer.NewLogin(t, clientID)
	conf := oauth2.Config{ClientID: clientID, RedirectURL: "http://127.0.0.1:1/callback",
		Endpoint: oauth2.Endpoint{AuthURL: iss.URL + "/authorize", TokenURL: iss.URL + "/token", AuthStyle: oauth2.AuthStyleInParams}}
	code := func(verifier string) string {
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(verifier)))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		u, _ := url.Parse(resp.Header.Get("Location"))
		return u.Query().Get("code")
	}
	right := oauth2.GenerateVerifier()
	_, err := conf.Exchange(t.Context(), code(right), oauth2.VerifierOption(oauth2.GenerateVerifier()))
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
		t.Fatalf("wrong verifier: %v, want invalid_grant", err)
	}
	if _, err := conf.Exchange(t.Context(), code(right), oauth2.VerifierOption(right)); err != nil {
		t.Fatalf("right verifier: %v", err)
	}
}

func TestSourceRefreshesAndSaves(t *testing.T) {
	iss := oidcissuer.NewLogin(t, clientID)
	iss.SetTTL(5 * time.Second) // within RefreshBefore: the next use refreshes
	tok, err := discover(t, iss).Device(t.Context(), approveWhenPrompted(t, iss, true))
	if err != nil {
		t.Fatal(err)
	}
	iss.SetTTL(time.Hour)
	var saved []*login.Token
	src := login.NewSource(tok, http.DefaultClient, false, func(t *login.Token) error { saved = append(saved, t); return nil })
	id, err := src.IDToken(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if id == tok.IDToken || len(saved) != 1 || saved[0].IDToken != id || iss.Refreshes() != 1 {
		t.Fatalf("expiring token not refreshed and saved: %d saved, %d refreshes", len(saved), iss.Refreshes())
	}
	if saved[0].RefreshToken == tok.RefreshToken || iss.RefreshTokenLive(tok.RefreshToken) {
		t.Errorf("the rotated refresh token was not kept")
	}
	if again, err := src.IDToken(t.Context()); err != nil || again != id || iss.Refreshes() != 1 {
		t.Errorf("a fresh token was refreshed again: %v, %d refreshes", err, iss.Refreshes())
	}

	t.Run("refresh token revoked", func(t *testing.T) {
		p := discover(t, iss)
		if err := p.Revoke(t.Context(), saved[0].RefreshToken); err != nil {
			t.Fatal(err)
		}
		expired := *saved[0]
		expired.Expiry = time.Now().Add(-time.Minute)
		_, err := login.NewSource(&expired, http.DefaultClient, false, func(*login.Token) error { return nil }).IDToken(t.Context())
		if err == nil || !strings.Contains(err.Error(), "invalid_grant") || !strings.Contains(err.Error(), "kobe login") {
			t.Fatalf("revoked refresh token: %v", err)
		}
	})
	t.Run("no refresh token", func(t *testing.T) {
		expired := login.Token{Issuer: iss.URL, ClientID: clientID, IDToken: "x", Expiry: time.Now().Add(-time.Minute)}
		if _, err := login.NewSource(&expired, http.DefaultClient, false, nil).IDToken(t.Context()); !errors.Is(err, login.ErrNoRefreshToken) {
			t.Fatalf("no refresh token: %v", err)
		}
	})
	if n := iss.BearersSeen(); n != 0 {
		t.Errorf("%d requests to the issuer carried a bearer token", n)
	}
}

// TestSourceTakesAnotherProcesssRefresh: two processes hold the same
// login; the first refreshes (and the issuer rotates the refresh token),
// the second then finds the renewed login stored and uses it instead of
// refreshing with a refresh token that is no longer valid.
func TestSourceTakesAnotherProcesssRefresh(t *testing.T) {
	iss := oidcissuer.NewLogin(t, clientID)
	iss.SetTTL(5 * time.Second)
	tok, err := discover(t, iss).Device(t.Context(), approveWhenPrompted(t, iss, true))
	if err != nil {
		t.Fatal(err)
	}
	iss.SetTTL(time.Hour)
	var stored *login.Token
	save := func(t *login.Token) error { stored = t; return nil }
	load := func() (*login.Token, error) { return stored, nil }
	a, b := *tok, *tok
	first := login.NewSource(&a, http.DefaultClient, false, save)
	first.Load = load
	second := login.NewSource(&b, http.DefaultClient, false, save)
	second.Load = load
	one, err := first.IDToken(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	two, err := second.IDToken(t.Context())
	if err != nil || two != one || iss.Refreshes() != 1 {
		t.Fatalf("second process: %v, same token %v, %d refreshes; want the first's renewal", err, two == one, iss.Refreshes())
	}
}
