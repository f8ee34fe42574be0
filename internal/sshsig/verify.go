package sshsig

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// DefaultWindow is how far a signature's timestamp may be from the server's
// clock, either way. Clients sign just before sending, so the window only
// has to absorb clock skew and transit: 30 seconds covers a laptop whose
// clock has drifted without NTP for weeks, and bounds how long a nonce must
// be remembered.
const DefaultWindow = 30 * time.Second

// nonceMargin is kept beyond a nonce's computed expiry: timestamps and the
// stores' expiries are whole seconds.
const nonceMargin = time.Second

// NonceExpiry is when the nonce of a signature made at ts may be forgotten
// by servers that accept ts within window of their clocks, when the clock
// of the server that forgets it (the janitor's) may be up to skew ahead of
// another's. Until ts+window+skew on the forgetting clock, a server whose
// clock lags by skew still accepts the signature, so the nonce must still
// be there to refuse its replay.
func NonceExpiry(ts time.Time, window, skew time.Duration) time.Time {
	return ts.Add(window + max(skew, 0) + nonceMargin)
}

var (
	// ErrClockSkew: the timestamp is outside the window.
	ErrClockSkew = errors.New("signature timestamp outside the accepted window")
	// ErrWrongAudience: the signature is for another server.
	ErrWrongAudience = errors.New("signature is for another server")
	// ErrBadSignature: the signature does not verify over this request.
	ErrBadSignature = errors.New("signature does not match the request")
	// ErrReplayed: the same key and nonce were seen before.
	ErrReplayed = errors.New("signature was already used")
	// ErrBusy: the nonce store is full; the request is refused rather than
	// risk accepting a replay.
	ErrBusy = errors.New("too many signed requests in the window")
	// ErrNonceStore: the nonce store failed (its error is wrapped too); the
	// request is refused rather than accepted unrecorded.
	ErrNonceStore = errors.New("the server could not record the signature's nonce; try again")
)

// NonceStore records the nonces of accepted signatures. Servers that share
// trust in a key must share one store, or a request accepted by one of them
// can be replayed to another.
type NonceStore interface {
	// Claim records id until expires. It fails with ErrReplayed when id is
	// recorded already, and with another error (ErrBusy, or the store's own)
	// when it cannot tell: both refuse the request.
	Claim(ctx context.Context, id string, expires time.Time) error
}

// VerifierOptions configure a Verifier; zero values take the defaults.
type VerifierOptions struct {
	// Audience identifies this server (see ValidAudience); signatures for
	// any other audience are refused. Required.
	Audience string
	// Window is the accepted clock difference either way (DefaultWindow).
	Window time.Duration
	// MaxSkew is the largest difference between the clocks of the servers
	// that share Nonces that still cannot let a replay through (Window:
	// servers may disagree as much as a client may from any of them).
	MaxSkew time.Duration
	// Nonces records nonces; a MemoryNonceStore on Now when nil, which
	// only protects a single process.
	Nonces NonceStore
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Verifier checks signed requests and records their nonces until their
// timestamps leave the window of every server sharing the nonce store (see
// NonceExpiry). It is safe for concurrent use.
type Verifier struct {
	audience string
	window   time.Duration
	skew     time.Duration
	nonces   NonceStore
	now      func() time.Time
}

// NewVerifier returns a Verifier, or an error when the audience is invalid.
func NewVerifier(o VerifierOptions) (*Verifier, error) {
	if !ValidAudience(o.Audience) {
		return nil, fmt.Errorf("SSH audience %q must be 1 to %d printable ASCII bytes", truncate(o.Audience, 64), MaxAudienceLen)
	}
	v := &Verifier{audience: o.Audience, window: o.Window, skew: o.MaxSkew, nonces: o.Nonces, now: o.Now}
	if v.window <= 0 {
		v.window = DefaultWindow
	}
	if v.skew <= 0 {
		v.skew = v.window
	}
	if v.now == nil {
		v.now = time.Now
	}
	if v.nonces == nil {
		v.nonces = NewMemoryNonceStore(0, v.now)
	}
	return v, nil
}

// Window is the accepted clock difference.
func (v *Verifier) Window() time.Duration { return v.window }

// Audience is the audience signatures must name.
func (v *Verifier) Audience() string { return v.audience }

// Verify checks h against the request r with body (the exact bytes read):
// the timestamp window, the audience, the signature over r's method, target
// and body, and then claims the nonce. Call it only for a key the caller
// trusts: the nonce is consumed when everything else holds.
func (v *Verifier) Verify(ctx context.Context, r *http.Request, body []byte, h *Header) error {
	return v.VerifySum(ctx, r, sha256.Sum256(body), h)
}

// VerifySum is Verify for a body known by its SHA-256: a streamed body,
// checked against bodySum once it has been read.
func (v *Verifier) VerifySum(ctx context.Context, r *http.Request, bodySum [sha256.Size]byte, h *Header) error {
	if h == nil || h.Key == nil || h.Signature == nil {
		return ErrMalformed
	}
	now := v.now()
	ts := time.Unix(h.Timestamp, 0)
	if d := now.Sub(ts); d > v.window || d < -v.window {
		return fmt.Errorf("%w (±%s): check the clock of the signing machine", ErrClockSkew, v.window)
	}
	if h.Audience != v.audience {
		return fmt.Errorf("%w: signed for audience %q, this server's audience is %q", ErrWrongAudience, truncate(h.Audience, 64), v.audience)
	}
	data := SignedDataSum(r.Method, Target(r.URL), h.Timestamp, h.Nonce, bodySum, h.KeyText, h.Audience)
	if err := h.Key.Verify(data, h.Signature); err != nil {
		return ErrBadSignature
	}
	// The nonce is remembered until the timestamp has left the window of
	// every server sharing the store; after that their clock checks refuse
	// the signature on their own.
	if err := v.nonces.Claim(ctx, NonceID(h), NonceExpiry(ts, v.window, v.skew)); err != nil {
		if errors.Is(err, ErrReplayed) || errors.Is(err, ErrBusy) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrNonceStore, err)
	}
	return nil
}

// NonceID names a signature's nonce in a NonceStore: the key's fingerprint
// and the nonce, so that two keys never share a nonce.
func NonceID(h *Header) string { return h.Fingerprint() + " " + h.Nonce }
