package auth

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestReviewCacheBounded: a flood of distinct tokens never grows the cache
// past its bound, refused and accepted answers expire on their own TTLs,
// and the cache is keyed by hashes (its key type holds no token).
func TestReviewCacheBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := newReviewCache(10*time.Second, 3*time.Second, 100)
	refused := reviewEntry{err: errServiceAccountRefused}
	for i := range 1000 {
		c.put(reviewKey(fmt.Sprintf("bad-token-%d", i), nil), refused, now)
		if c.len() > 100 {
			t.Fatalf("cache holds %d answers after %d puts, bound 100", c.len(), i+1)
		}
	}
	// The newest answer survived the evictions.
	if e, ok := c.get(reviewKey("bad-token-999", nil), now); !ok || !errors.Is(e.err, errServiceAccountRefused) {
		t.Fatalf("newest refusal: %+v, %v", e, ok)
	}

	good := reviewEntry{claims: Claims{"sub": "system:serviceaccount:ci:deployer"}}
	c.put(reviewKey("good-token", []string{"kobe"}), good, now)
	if _, ok := c.get(reviewKey("good-token", nil), now); ok {
		t.Fatal("an answer for other audiences was reused")
	}
	later := now.Add(5 * time.Second)
	if _, ok := c.get(reviewKey("bad-token-999", nil), later); ok {
		t.Fatal("refusal outlived its 3s TTL")
	}
	if e, ok := c.get(reviewKey("good-token", []string{"kobe"}), later); !ok || e.claims["sub"] != "system:serviceaccount:ci:deployer" {
		t.Fatal("accepted answer expired before its 10s TTL")
	}
	if _, ok := c.get(reviewKey("good-token", []string{"kobe"}), now.Add(10*time.Second)); ok {
		t.Fatal("accepted answer outlived its TTL")
	}
}
