package auth

import (
	"net"
	"net/http"
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

// sourceOf is the caller's address as the connection shows it (a proxy in
// front of kobe is one source for all the callers behind it).
func sourceOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
