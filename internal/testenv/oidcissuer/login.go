package oidcissuer

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Login is an Issuer that also logs people in for one public client (no
// secret): the device authorization grant (RFC 8628), the authorization
// code grant with PKCE S256 (RFC 7636, redirect to http://127.0.0.1 only),
// refresh tokens that rotate on use, and revocation (RFC 7009). The test
// plays the person: Approve or Deny a device's user code; the authorize
// endpoint approves at once (or refuses, with DenyAuthorize) and redirects,
// for the test's "browser" to follow.
type Login struct {
	*Issuer
	ClientID string

	key *rsa.PrivateKey

	mu            sync.Mutex
	claims        map[string]any
	ttl           time.Duration
	deviceTTL     time.Duration
	denyAuthorize bool
	devices       map[string]*deviceGrant // by device code
	userCodes     map[string]string       // user code -> device code
	codes         map[string]*codeGrant   // by authorization code
	refresh       map[string]bool         // live refresh tokens
	revoked       []string
	// received are the form values and Authorization headers of every
	// request to the login endpoints.
	received []string

	refreshes, bearers atomic.Int32
}

type deviceGrant struct {
	expires  time.Time
	approved bool
	denied   bool
}

type codeGrant struct {
	challenge, redirectURI, nonce string
}

const loginKID = "login"

// NewLogin starts a Login for clientID that is closed when the test ends.
// Tokens name the person claims (sub "alice", email alice@example.com
// unless SetClaims says otherwise) and live for an hour unless SetTTL.
func NewLogin(t testing.TB, clientID string) *Login {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	l := &Login{
		Issuer: New(t), ClientID: clientID, key: key,
		claims: map[string]any{"sub": "alice", "email": "alice@example.com"},
		ttl:    time.Hour, deviceTTL: time.Minute,
		devices: map[string]*deviceGrant{}, userCodes: map[string]string{}, codes: map[string]*codeGrant{}, refresh: map[string]bool{},
	}
	l.Publish(key, loginKID, jose.RS256)
	l.Issuer.mu.Lock()
	maps.Copy(l.discovery, map[string]any{
		"authorization_endpoint":           l.URL + "/authorize",
		"token_endpoint":                   l.URL + "/token",
		"device_authorization_endpoint":    l.URL + "/device",
		"revocation_endpoint":              l.URL + "/revoke",
		"response_types_supported":         []string{"code"},
		"grant_types_supported":            []string{"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"},
		"code_challenge_methods_supported": []string{"S256"},
	})
	l.Issuer.mu.Unlock()
	for pattern, h := range map[string]http.HandlerFunc{
		"POST /device":   l.device,
		"POST /token":    l.token,
		"GET /authorize": l.authorize,
		"POST /revoke":   l.revoke,
	} {
		l.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(strings.ToLower(r.Header.Get("Authorization")), "bearer ") {
				l.bearers.Add(1)
			}
			_ = r.ParseForm()
			l.mu.Lock()
			l.received = append(l.received, r.Header.Get("Authorization"))
			for _, vs := range r.Form {
				l.received = append(l.received, vs...)
			}
			l.mu.Unlock()
			h(w, r)
		})
	}
	return l
}

// SetClaims replaces the person's claims in tokens issued from now on.
func (l *Login) SetClaims(claims map[string]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims = maps.Clone(claims)
}

// SetTTL sets the lifetime of ID tokens issued from now on.
func (l *Login) SetTTL(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ttl = d
}

// SetDeviceTTL sets the lifetime of device codes issued from now on.
func (l *Login) SetDeviceTTL(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deviceTTL = d
}

// DenyAuthorize makes the authorize endpoint refuse (access_denied).
func (l *Login) DenyAuthorize(deny bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.denyAuthorize = deny
}

// Approve approves the device whose user code is userCode, as the person.
func (l *Login) Approve(userCode string) error { return l.decide(userCode, true) }

// Deny refuses the device whose user code is userCode.
func (l *Login) Deny(userCode string) error { return l.decide(userCode, false) }

func (l *Login) decide(userCode string, approve bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.devices[l.userCodes[userCode]]
	if !ok {
		return fmt.Errorf("no device with user code %q", userCode)
	}
	d.approved, d.denied = approve, !approve
	return nil
}

// Refreshes counts refresh_token grants answered with tokens.
func (l *Login) Refreshes() int { return int(l.refreshes.Load()) }

// BearersSeen counts requests to the login endpoints that carried an
// Authorization: Bearer header (a client must never send one there).
func (l *Login) BearersSeen() int { return int(l.bearers.Load()) }

// Received reports whether any request to the login endpoints carried
// secret in a form value or its Authorization header.
func (l *Login) Received(secret string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.received {
		if strings.Contains(v, secret) {
			return true
		}
	}
	return false
}

// Revoked lists the tokens revoked so far.
func (l *Login) Revoked() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.revoked...)
}

// RefreshTokenLive reports whether rt is a refresh token the issuer would
// still honour.
func (l *Login) RefreshTokenLive(rt string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refresh[rt]
}

// IDToken signs an ID token of the person for audience aud, as the token
// endpoint would (for tests that need one without a flow).
func (l *Login) IDToken(t testing.TB, aud string) string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	tok, err := l.idToken(aud, "")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (l *Login) idToken(aud, nonce string) (string, error) {
	now := time.Now()
	claims := maps.Clone(l.claims)
	maps.Copy(claims, map[string]any{"iss": l.URL, "aud": aud, "iat": now.Unix(), "exp": now.Add(l.ttl).Unix()})
	if nonce != "" {
		claims["nonce"] = nonce
	}
	return Sign(l.key, loginKID, jose.RS256, claims)
}

func (l *Login) device(w http.ResponseWriter, r *http.Request) {
	if l.clientOf(r) != l.ClientID {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	deviceCode, userCode := random(), strings.ToUpper(random()[:8])
	l.devices[deviceCode] = &deviceGrant{expires: time.Now().Add(l.deviceTTL)}
	l.userCodes[userCode] = deviceCode
	writeJSON(w, http.StatusOK, map[string]any{
		"device_code": deviceCode, "user_code": userCode,
		"verification_uri":          l.URL + "/activate",
		"verification_uri_complete": l.URL + "/activate?user_code=" + userCode,
		"expires_in":                int(l.deviceTTL.Seconds()), "interval": 1,
	})
}

func (l *Login) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || redirect.Scheme != "http" || redirect.Hostname() != "127.0.0.1" || q.Get("client_id") != l.ClientID {
		http.Error(w, "unknown client or redirect_uri", http.StatusBadRequest)
		return
	}
	back := redirect.Query()
	back.Set("state", q.Get("state"))
	l.mu.Lock()
	switch {
	case l.denyAuthorize:
		back.Set("error", "access_denied")
	case q.Get("response_type") != "code" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		back.Set("error", "invalid_request")
	default:
		code := random()
		l.codes[code] = &codeGrant{challenge: q.Get("code_challenge"), redirectURI: redirect.String(), nonce: q.Get("nonce")}
		back.Set("code", code)
	}
	l.mu.Unlock()
	redirect.RawQuery = back.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

func (l *Login) token(w http.ResponseWriter, r *http.Request) {
	if l.clientOf(r) != l.ClientID {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.PostForm.Get("grant_type") {
	case "urn:ietf:params:oauth:grant-type:device_code":
		code := r.PostForm.Get("device_code")
		d, ok := l.devices[code]
		switch {
		case !ok:
			oauthError(w, http.StatusBadRequest, "invalid_grant")
		case time.Now().After(d.expires):
			oauthError(w, http.StatusBadRequest, "expired_token")
		case d.denied:
			oauthError(w, http.StatusBadRequest, "access_denied")
		case !d.approved:
			oauthError(w, http.StatusBadRequest, "authorization_pending")
		default:
			delete(l.devices, code)
			l.issue(w, "")
		}
	case "authorization_code":
		code := r.PostForm.Get("code")
		c, ok := l.codes[code]
		delete(l.codes, code) // one use, right or wrong
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		switch {
		case !ok || c.redirectURI != r.PostForm.Get("redirect_uri"):
			oauthError(w, http.StatusBadRequest, "invalid_grant")
		case base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge:
			oauthErrorDescribed(w, http.StatusBadRequest, "invalid_grant", "PKCE verification failed")
		default:
			l.issue(w, c.nonce)
		}
	case "refresh_token":
		rt := r.PostForm.Get("refresh_token")
		if !l.refresh[rt] {
			oauthError(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		delete(l.refresh, rt)
		l.refreshes.Add(1)
		l.issue(w, "")
	default:
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type")
	}
}

// issue answers a token response, with nonce in the ID token when the
// authorization request had one; l.mu is held.
func (l *Login) issue(w http.ResponseWriter, nonce string) {
	id, err := l.idToken(l.ClientID, nonce)
	if err != nil {
		oauthError(w, http.StatusInternalServerError, "server_error")
		return
	}
	rt := random()
	l.refresh[rt] = true
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": random(), "token_type": "Bearer", "expires_in": int(l.ttl.Seconds()),
		"refresh_token": rt, "id_token": id,
	})
}

func (l *Login) revoke(w http.ResponseWriter, r *http.Request) {
	if l.clientOf(r) != l.ClientID {
		oauthError(w, http.StatusUnauthorized, "invalid_client")
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	tok := r.PostForm.Get("token")
	delete(l.refresh, tok)
	l.revoked = append(l.revoked, tok)
	w.WriteHeader(http.StatusOK)
}

// clientOf is the client of a form request: client_id in the form, or
// the user of HTTP Basic authentication.
func (l *Login) clientOf(r *http.Request) string {
	if err := r.ParseForm(); err != nil {
		return ""
	}
	if id, _, ok := r.BasicAuth(); ok {
		return id
	}
	return r.PostForm.Get("client_id")
}

func oauthError(w http.ResponseWriter, code int, e string) { oauthErrorDescribed(w, code, e, "") }

func oauthErrorDescribed(w http.ResponseWriter, code int, e, description string) {
	body := map[string]string{"error": e}
	if description != "" {
		body["error_description"] = description
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func random() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
