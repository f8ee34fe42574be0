package auth

import (
	"context"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// Per-source bound on the work done before a caller is known: TokenReviews
// of tokens the review cache has not seen. The overall bound
// (MaxConcurrentReviews) keeps the host API server safe; this one keeps one
// source from taking every review slot from the others with forged tokens.
//
// Only refused tokens are charged: callers behind one proxy or NAT share a
// source, and a burst of CI jobs each with a fresh, valid token must not
// be refused for it. A source that has spent its budget on refused tokens
// gets no more reviews until the budget refills.
const (
	// DefaultRefusalsPerSource is how many refused uncached tokens one
	// source address may send a second, with a burst of
	// DefaultRefusalBurst.
	DefaultRefusalsPerSource = 2
	DefaultRefusalBurst      = 10
	// reviewSources is how many source addresses are remembered; the
	// least recently seen is forgotten first, so memory stays bounded.
	reviewSources = 4096
)

type sourceLimiter struct {
	mu     sync.Mutex
	every  rate.Limit
	burst  int
	recent *lru.Cache
}

func newSourceLimiter(perSecond float64, burst int) *sourceLimiter {
	return &sourceLimiter{every: rate.Limit(perSecond), burst: burst, recent: lru.New(reviewSources)}
}

func (s *sourceLimiter) limiter(source string) *rate.Limiter {
	if v, ok := s.recent.Get(source); ok {
		return v.(*rate.Limiter)
	}
	l := rate.NewLimiter(s.every, s.burst)
	s.recent.Add(source, l)
	return l
}

// mayReview says whether source has budget left for one more review.
func (s *sourceLimiter) mayReview(source string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limiter(source).TokensAt(now) >= 1
}

// refused charges source for one token the host refused.
func (s *sourceLimiter) refused(source string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limiter(source).AllowN(now, 1)
}

// sourceKey is the context key of the caller's address (WithSource).
type sourceKey struct{}

// WithSource returns a copy of ctx that names addr as the address of the
// request's caller, which the per-source limits then charge instead of the
// connection's peer. The API server sets it from X-Forwarded-For, and only
// when the peer is a proxy it was told to trust (apiserver's
// Options.TrustedProxies): a header from anyone else is never read.
func WithSource(ctx context.Context, addr netip.Addr) context.Context {
	return context.WithValue(ctx, sourceKey{}, addr)
}

// sourceOf is the key of r's caller in the per-source limits: the address
// WithSource put in r's context, else the connection's peer (every caller
// behind a proxy that is not trusted shares it). An IPv6 address counts by
// its /64, the block that one host or site is given, so that a caller
// cannot take a fresh budget from each of its addresses.
func sourceOf(r *http.Request) string {
	addr, ok := r.Context().Value(sourceKey{}).(netip.Addr)
	if !ok || !addr.IsValid() {
		peer, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return r.RemoteAddr
		}
		addr = peer.Addr()
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		block, _ := addr.Prefix(64)
		return block.String()
	}
	return addr.String()
}
