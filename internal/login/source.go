package login

import (
	"context"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// RefreshBefore is how long before its expiry an ID token is renewed, so
// that a request does not reach the server with a token that expires on
// the way.
const RefreshBefore = 10 * time.Second

// Source hands out the ID token of a stored login, refreshing it through
// its issuer (never another) when it expires within RefreshBefore and
// passing each new Token to save before it is used.
type Source struct {
	mu        sync.Mutex
	tok       *Token
	client    *http.Client
	allowHTTP bool
	save      func(*Token) error
	// Load, when set, reads the stored login again before a refresh and
	// after a failed one: another process may have refreshed it (and the
	// issuer rotated the refresh token this Source holds).
	Load func() (*Token, error)
}

// NewSource returns a Source of tok that talks to the issuer with client.
func NewSource(tok *Token, client *http.Client, allowHTTP bool, save func(*Token) error) *Source {
	return &Source{tok: tok, client: client, allowHTTP: allowHTTP, save: save}
}

// reload takes a stored login that another process renewed, when there is
// one that is still fresh.
func (s *Source) reload() bool {
	if s.Load == nil {
		return false
	}
	stored, err := s.Load()
	if err != nil || stored == nil || stored.IDToken == s.tok.IDToken || time.Until(stored.Expiry) <= RefreshBefore {
		return false
	}
	s.tok = stored
	return true
}

// IDToken returns a current ID token.
func (s *Source) IDToken(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	current := &oauth2.Token{AccessToken: s.tok.IDToken, Expiry: s.tok.Expiry}
	tok, err := oauth2.ReuseTokenSourceWithExpiry(current, &refresher{ctx: ctx, s: s}, RefreshBefore).Token()
	if err != nil {
		return "", err
	}
	return tok.AccessToken, nil
}

// refresher is the oauth2.TokenSource behind IDToken's reuse: it discovers
// the stored issuer, refreshes, saves, and hands back the ID token.
type refresher struct {
	ctx context.Context
	s   *Source
}

func (r *refresher) Token() (*oauth2.Token, error) {
	s := r.s
	if s.reload() {
		return &oauth2.Token{AccessToken: s.tok.IDToken, Expiry: s.tok.Expiry}, nil
	}
	if s.tok.RefreshToken == "" {
		return nil, ErrNoRefreshToken
	}
	p, err := Discover(r.ctx, s.client, Config{Issuer: s.tok.Issuer, ClientID: s.tok.ClientID, Scopes: s.tok.Scopes, AllowHTTP: s.allowHTTP})
	if err != nil {
		return nil, err
	}
	next, err := p.Refresh(r.ctx, s.tok)
	if err != nil {
		if s.reload() {
			return &oauth2.Token{AccessToken: s.tok.IDToken, Expiry: s.tok.Expiry}, nil
		}
		return nil, err
	}
	if err := s.save(next); err != nil {
		return nil, err
	}
	s.tok = next
	return &oauth2.Token{AccessToken: next.IDToken, Expiry: next.Expiry}, nil
}
