package login

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Config is what the kobe API publishes at GET /.well-known/kunobi-auth.
type Config struct {
	Issuer   string
	ClientID string
	Scopes   []string
	// AllowHTTP accepts an http:// issuer that is not on this machine.
	AllowHTTP bool
}

// Token is what a login yields and the CLI keeps (0600): the ID token sent
// to the kobe API as the bearer token, the refresh token that renews it,
// and the ID token's expiry. Issuer and ClientID say whom to refresh with,
// so a later change of the API's discovery document never sends this
// refresh token anywhere else.
type Token struct {
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"client_id"`
	Scopes       []string  `json:"scopes,omitempty"`
	IDToken      string    `json:"id_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry"`
}

// Errors of the flows, for callers to branch on; their messages say what
// happened.
var (
	ErrAccessDenied   = errors.New("the login was denied at the issuer")
	ErrExpired        = errors.New("the login was not approved in time: the device code expired")
	ErrStateMismatch  = errors.New("the browser came back with a state that is not this login's: refused, since another page or program answered the redirect")
	ErrNoRefreshToken = errors.New("the stored login has no refresh token and its ID token has expired: run `kobe login` again")
)

// Provider is a discovered issuer, ready for a flow, a refresh or a
// revocation.
type Provider struct {
	cfg        Config
	client     *http.Client
	provider   *oidc.Provider
	oauth      oauth2.Config
	revocation string
}

// Discover reads the issuer's discovery document (its issuer must be
// cfg.Issuer) with client, which must send no credentials of its own.
func Discover(ctx context.Context, client *http.Client, cfg Config) (*Provider, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("the login names no issuer or client ID")
	}
	if err := checkIssuerURL(cfg.Issuer, cfg.AllowHTTP); err != nil {
		return nil, err
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, client), cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discovering the OIDC issuer %s: %w", cfg.Issuer, err)
	}
	var meta struct {
		Revocation string `json:"revocation_endpoint"`
	}
	if err := p.Claims(&meta); err != nil {
		return nil, fmt.Errorf("reading the discovery document of %s: %w", cfg.Issuer, err)
	}
	scopes := slices.Clone(cfg.Scopes)
	if !slices.Contains(scopes, oidc.ScopeOpenID) {
		scopes = append([]string{oidc.ScopeOpenID}, scopes...)
	}
	endpoint := p.Endpoint()
	// A public client: client_id in the form, no secret, no Basic header.
	endpoint.AuthStyle = oauth2.AuthStyleInParams
	return &Provider{
		cfg: cfg, client: client, provider: p, revocation: meta.Revocation,
		oauth: oauth2.Config{ClientID: cfg.ClientID, Endpoint: endpoint, Scopes: scopes},
	}, nil
}

// checkIssuerURL refuses an issuer that is not https:// (http:// only on
// loopback, or with allowHTTP): refresh tokens and ID tokens would cross
// the network in the clear.
func checkIssuerURL(issuer string, allowHTTP bool) error {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" {
		return fmt.Errorf("the login's issuer %q is not a URL", issuer)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && (allowHTTP || isLoopback(u.Hostname())):
		return nil
	}
	return fmt.Errorf("the login's issuer %s is not https://: tokens would cross the network in the clear (--insecure allows http://)", u.Redacted())
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// CanDevice reports whether the issuer offers the device flow.
func (p *Provider) CanDevice() bool { return p.oauth.Endpoint.DeviceAuthURL != "" }

// CanBrowser reports whether the issuer offers the authorization code flow.
func (p *Provider) CanBrowser() bool { return p.oauth.Endpoint.AuthURL != "" }

// CanRevoke reports whether the issuer has a revocation endpoint.
func (p *Provider) CanRevoke() bool { return p.revocation != "" }

func (p *Provider) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, p.client)
}

// Device runs the device authorization flow (RFC 8628): prompt shows the
// person where to go and which code to enter, then the issuer is polled
// until they approve, deny, or the code expires.
func (p *Provider) Device(ctx context.Context, prompt func(*oauth2.DeviceAuthResponse) error) (*Token, error) {
	if !p.CanDevice() {
		return nil, fmt.Errorf("the issuer %s offers no device flow (no device_authorization_endpoint): log in with --browser", p.cfg.Issuer)
	}
	ctx = p.ctx(ctx)
	da, err := p.oauth.DeviceAuth(ctx)
	if err != nil {
		return nil, flowError("starting the device login", err)
	}
	if err := prompt(da); err != nil {
		return nil, err
	}
	tok, err := p.oauth.DeviceAccessToken(ctx, da)
	if errors.Is(err, context.DeadlineExceeded) && !da.Expiry.IsZero() && !time.Now().Before(da.Expiry) {
		return nil, ErrExpired
	}
	if err != nil {
		return nil, flowError("waiting for the device login", err)
	}
	return p.token(ctx, tok, "")
}

// Browser runs the authorization code flow with PKCE (S256) and a
// loopback redirect on 127.0.0.1 at a random port: open is given the URL
// to show the person (in a browser of this machine). A redirect whose
// state is not this login's ends it with ErrStateMismatch.
func (p *Provider) Browser(ctx context.Context, open func(authURL string) error) (*Token, error) {
	if !p.CanBrowser() {
		return nil, fmt.Errorf("the issuer %s offers no authorization endpoint: log in with --device", p.cfg.Issuer)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the login's redirect: %w", err)
	}
	conf := p.oauth
	conf.RedirectURL = "http://" + ln.Addr().String() + "/callback"
	state, nonce, verifier := randomText(), randomText(), oauth2.GenerateVerifier()

	type result struct {
		code string
		err  error
	}
	results := make(chan result, 1)
	deliver := func(r result) {
		select {
		case results <- r:
		default: // the first answer counts
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /callback", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case q.Get("state") != state:
			http.Error(w, "This login's state does not match: refused. Run kobe login again.", http.StatusBadRequest)
			deliver(result{err: ErrStateMismatch})
		case q.Get("error") == "access_denied":
			http.Error(w, "The login was denied. You can close this page.", http.StatusForbidden)
			deliver(result{err: ErrAccessDenied})
		case q.Get("error") != "":
			http.Error(w, "The login failed. You can close this page.", http.StatusBadRequest)
			deliver(result{err: fmt.Errorf("the issuer refused the login: %s %s", q.Get("error"), q.Get("error_description"))})
		case q.Get("code") == "":
			http.Error(w, "No authorization code.", http.StatusBadRequest)
			deliver(result{err: errors.New("the issuer redirected without an authorization code")})
		default:
			_, _ = fmt.Fprintln(w, "Logged in to kobe. You can close this page.")
			deliver(result{code: q.Get("code")})
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		// Let the browser get its page before the listener goes.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	authURL := conf.AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce))
	if err := open(authURL); err != nil {
		return nil, err
	}
	var r result
	select {
	case r = <-results:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the browser to come back: %w", context.Cause(ctx))
	}
	if r.err != nil {
		return nil, r.err
	}
	ctx = p.ctx(ctx)
	tok, err := conf.Exchange(ctx, r.code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, flowError("exchanging the authorization code", err)
	}
	return p.token(ctx, tok, nonce)
}

// token verifies the ID token of an issuer's answer (signature, issuer,
// audience = the client, expiry, and nonce when one was sent) and makes a
// Token of it.
func (p *Provider) token(ctx context.Context, tok *oauth2.Token, nonce string) (*Token, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, fmt.Errorf("the issuer %s returned no ID token: does the client have the openid scope?", p.cfg.Issuer)
	}
	id, err := p.provider.VerifierContext(p.ctx(ctx), &oidc.Config{ClientID: p.cfg.ClientID}).Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("the issuer's ID token does not verify: %w", err)
	}
	if nonce != "" && id.Nonce != nonce {
		return nil, errors.New("the issuer's ID token does not carry this login's nonce: refused")
	}
	return &Token{
		Issuer: p.cfg.Issuer, ClientID: p.cfg.ClientID, Scopes: p.oauth.Scopes,
		IDToken: raw, RefreshToken: tok.RefreshToken, Expiry: id.Expiry,
	}, nil
}

// Refresh gets a new ID token with tok's refresh token. The issuer may
// rotate the refresh token; when it sends none, the old one is kept.
func (p *Provider) Refresh(ctx context.Context, tok *Token) (*Token, error) {
	if tok.RefreshToken == "" {
		return nil, ErrNoRefreshToken
	}
	ctx = p.ctx(ctx)
	fresh, err := p.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		return nil, flowError("refreshing the login", err)
	}
	next, err := p.token(ctx, fresh, "")
	if err != nil {
		return nil, err
	}
	if next.RefreshToken == "" {
		next.RefreshToken = tok.RefreshToken
	}
	return next, nil
}

// Revoke revokes refreshToken at the issuer's revocation endpoint (RFC
// 7009), which also ends the ID tokens issued with it where the issuer
// supports that.
func (p *Provider) Revoke(ctx context.Context, refreshToken string) error {
	if !p.CanRevoke() {
		return fmt.Errorf("the issuer %s has no revocation endpoint", p.cfg.Issuer)
	}
	form := url.Values{"token": {refreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {p.cfg.ClientID}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.revocation, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("revoking the refresh token: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("revoking the refresh token: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("revoking the refresh token: the issuer answered %s", resp.Status)
	}
	return nil
}

// flowError says what failed, with the issuer's error code turned into
// the package's errors where one applies.
func flowError(what string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		switch re.ErrorCode {
		case "access_denied":
			return ErrAccessDenied
		case "expired_token":
			return ErrExpired
		case "invalid_grant":
			if re.ErrorDescription != "" {
				return fmt.Errorf("%s: the issuer refused the grant (invalid_grant: %s)", what, re.ErrorDescription)
			}
			return fmt.Errorf("%s: the issuer refused the grant (invalid_grant): run `kobe login` again", what)
		case "":
		default:
			return fmt.Errorf("%s: the issuer answered %s %s", what, re.ErrorCode, re.ErrorDescription)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

func randomText() string { return rand.Text() }
