package auth

import (
	"net"
	"net/http"
	"sync"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// Per-source bound on the work done before a caller is known: TokenReviews
// of tokens the review cache has not seen. The overall bound
// (MaxConcurrentReviews) keeps the host API server safe; this one keeps one
// source from taking every review slot from the others.
const (
	// DefaultReviewsPerSource is how many uncached TokenReviews one source
	// address may cause a second, with a burst of DefaultReviewBurst.
	DefaultReviewsPerSource = 2
	DefaultReviewBurst      = 10
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

// allow takes one review from source's budget.
func (s *sourceLimiter) allow(source string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l *rate.Limiter
	if v, ok := s.recent.Get(source); ok {
		l = v.(*rate.Limiter)
	} else {
		l = rate.NewLimiter(s.every, s.burst)
		s.recent.Add(source, l)
	}
	return l.Allow()
}

// sourceOf is the caller's address as the connection shows it (a proxy in
// front of kobe is one source for all the callers behind it).
func sourceOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
