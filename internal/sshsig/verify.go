package sshsig

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultWindow is how far a signature's timestamp may be from the server's clock.
const DefaultWindow = 60 * time.Second

// DefaultMaxNonces bounds the replay cache.
const DefaultMaxNonces = 100_000

var (
	// ErrClockSkew: the timestamp is outside the window.
	ErrClockSkew = errors.New("signature timestamp outside the accepted window")
	// ErrBadSignature: the signature does not verify over this request.
	ErrBadSignature = errors.New("signature does not match the request")
	// ErrReplayed: the same key and nonce were seen before.
	ErrReplayed = errors.New("signature was already used")
	// ErrBusy: the replay cache is full of live entries; the request is
	// refused rather than risk accepting a replay.
	ErrBusy = errors.New("too many signed requests in the window")
)

// VerifierOptions configure a Verifier; zero values take the defaults.
type VerifierOptions struct {
	// Window is the accepted clock difference either way (DefaultWindow).
	Window time.Duration
	// MaxNonces bounds the replay cache (DefaultMaxNonces).
	MaxNonces int
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Verifier checks signed requests and remembers their nonces until their
// timestamps leave the window. It is safe for concurrent use.
type Verifier struct {
	window time.Duration
	max    int
	now    func() time.Time

	mu        sync.Mutex
	seen      map[string]int64 // fingerprint + nonce -> Unix second after which it is forgotten
	lastSweep time.Time
}

// NewVerifier returns a Verifier.
func NewVerifier(o VerifierOptions) *Verifier {
	v := &Verifier{window: o.Window, max: o.MaxNonces, now: o.Now, seen: map[string]int64{}}
	if v.window <= 0 {
		v.window = DefaultWindow
	}
	if v.max <= 0 {
		v.max = DefaultMaxNonces
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v
}

// Window is the accepted clock difference.
func (v *Verifier) Window() time.Duration { return v.window }

// Verify checks h against the request r with body (the exact bytes read):
// the timestamp window, the signature over r's method, target and body, and
// the replay cache. Call it only for a key the caller trusts: the nonce is
// consumed when everything else holds.
func (v *Verifier) Verify(r *http.Request, body []byte, h *Header) error {
	if h == nil || h.Key == nil || h.Signature == nil {
		return ErrMalformed
	}
	now := v.now()
	ts := time.Unix(h.Timestamp, 0)
	if d := now.Sub(ts); d > v.window || d < -v.window {
		return fmt.Errorf("%w (±%s)", ErrClockSkew, v.window)
	}
	data := SignedData(r.Method, Target(r.URL), h.Timestamp, h.Nonce, body, h.KeyText)
	if err := h.Key.Verify(data, h.Signature); err != nil {
		return ErrBadSignature
	}
	return v.remember(h.Fingerprint()+" "+h.Nonce, h.Timestamp+int64(v.window/time.Second)+1, now)
}

// remember records id until the Unix second expires, failing on a replay.
func (v *Verifier) remember(id string, expires int64, now time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if exp, ok := v.seen[id]; ok && exp >= now.Unix() {
		return ErrReplayed
	}
	if len(v.seen) >= v.max || now.Sub(v.lastSweep) >= v.window {
		v.sweep(now)
	}
	if len(v.seen) >= v.max {
		return ErrBusy
	}
	v.seen[id] = expires
	return nil
}

func (v *Verifier) sweep(now time.Time) {
	v.lastSweep = now
	for id, exp := range v.seen {
		if exp < now.Unix() {
			delete(v.seen, id)
		}
	}
}

// nonces reports the size of the replay cache (tests).
func (v *Verifier) nonces() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.seen)
}
