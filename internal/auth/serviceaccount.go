package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/truncate"
)

// TokenReviewer creates TokenReviews; client-go's
// AuthenticationV1().TokenReviews() is one.
type TokenReviewer interface {
	Create(ctx context.Context, review *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// maxReviews bounds the TokenReview cache.
const maxReviews = 10_000

var errServiceAccountRefused = errors.New("ServiceAccount token not accepted")

// serviceAccountClaims reviews the token with the host API server for the
// policy's audiences. Claims: sub and username
// ("system:serviceaccount:<ns>:<name>"), namespace, serviceaccount, uid,
// groups. Answers are cached by a hash of the token and the audiences:
// accepted tokens for ReviewCacheTTL, refused ones for RefusalCacheTTL, so
// that a flood of one bad token costs the API server one TokenReview.
// Concurrent requests with the same token share one review.
func (a *Authenticator) serviceAccountClaims(ctx context.Context, pol *kobev1.AccessPolicy, cred *credential) (Claims, error) {
	if a.reviewer == nil {
		return nil, errors.New("ServiceAccount authentication is not configured on this server")
	}
	audiences := pol.Spec.Auth.ServiceAccount.Audiences
	if len(audiences) == 0 {
		// ValidatePolicy keeps such a policy NotReady; it must not accept
		// tokens meant for the host API server meanwhile.
		return nil, errors.New("the serviceAccount policy names no audience, so it accepts no token")
	}
	key := reviewKey(cred.bearer, audiences)
	if e, ok := a.reviews.get(key, a.clock.Now()); ok {
		return e.claims, e.err
	}
	v, _, _ := a.reviewFlight.Do(string(key[:]), func() (any, error) {
		if e, ok := a.reviews.get(key, a.clock.Now()); ok {
			return e, nil
		}
		// A token the cache has not seen costs the host a review: a source
		// that has sent too many refused tokens gets none for a while, so
		// one caller's flood of forged tokens leaves the review slots to
		// the others. Checked here, once per shared review, so that a flood
		// of one token costs its source one refusal.
		if !a.reviewRate.mayReview(cred.source, a.clock.Now()) {
			return reviewEntry{err: fmt.Errorf("%w: too many refused ServiceAccount tokens from %s", ErrBusy, cred.source)}, nil
		}
		// Reviews in flight are bounded, and one more is refused at once:
		// a flood of forged tokens must not queue work on the host API
		// server, nor hold the API's slots waiting for it.
		if !a.reviewSlots.TryAcquire(1) {
			return reviewEntry{err: fmt.Errorf("%w: TokenReviews in flight at their limit", ErrBusy)}, nil
		}
		defer a.reviewSlots.Release(1)
		// The review is shared by every waiting request: none of them may
		// cancel it for the others.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultHTTPTimeout)
		defer cancel()
		e, final := a.review(rctx, pol.Name, cred.bearer, audiences)
		if final {
			a.reviews.put(key, e, a.clock.Now())
			if e.err != nil {
				a.reviewRate.refused(cred.source, a.clock.Now())
			}
		}
		return e, nil
	})
	e := v.(reviewEntry)
	return e.claims, e.err
}

// review asks the API server about token. final is false when the answer
// says nothing about the token (the review itself failed) and must not be
// cached.
func (a *Authenticator) review(ctx context.Context, policy, token string, audiences []string) (_ reviewEntry, final bool) {
	res, err := a.reviewer.Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		a.log.Error(err, "TokenReview failed", "policy", policy)
		return reviewEntry{err: errors.New("could not review the ServiceAccount token; try again later")}, false
	}
	st := res.Status
	if !st.Authenticated {
		a.log.V(1).Info("TokenReview refused the token", "policy", policy, "reason", truncate.Log(st.Error, maxLoggedReason))
		return reviewEntry{err: errServiceAccountRefused}, true
	}
	// An audience-aware API server returns the audiences it checked; one
	// that ignores spec.audiences returns none, and must not pass.
	if len(audiences) > 0 && !intersects(st.Audiences, audiences) {
		return reviewEntry{err: errors.New("ServiceAccount token is not issued for an accepted audience")}, true
	}
	ns, name, ok := splitServiceAccount(st.User.Username)
	if !ok {
		return reviewEntry{err: errors.New("token does not belong to a ServiceAccount")}, true
	}
	groups := make([]any, len(st.User.Groups))
	for i, g := range st.User.Groups {
		groups[i] = g
	}
	return reviewEntry{claims: Claims{
		"sub":            st.User.Username,
		"username":       st.User.Username,
		"namespace":      ns,
		"serviceaccount": name,
		"uid":            st.User.UID,
		"groups":         groups,
	}}, true
}

func splitServiceAccount(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, serviceAccountUserPrefx)
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// reviewKey identifies a review without keeping the token.
func reviewKey(token string, audiences []string) [sha256.Size]byte {
	auds := slices.Clone(audiences)
	slices.Sort(auds)
	return sha256.Sum256([]byte(token + "\x00" + strings.Join(auds, "\x00")))
}

// reviewCache remembers review answers, at most max of them: accepted
// tokens for ttl, refused ones for refusedTTL. Keys are hashes: the cache
// never holds a token.
type reviewCache struct {
	ttl, refusedTTL time.Duration
	max             int

	mu      sync.Mutex
	entries map[[sha256.Size]byte]reviewEntry
}

// reviewEntry is one answer: claims, or err for a refused token.
type reviewEntry struct {
	claims  Claims
	err     error
	expires time.Time
}

func newReviewCache(ttl, refusedTTL time.Duration, max int) *reviewCache {
	return &reviewCache{ttl: ttl, refusedTTL: refusedTTL, max: max, entries: map[[sha256.Size]byte]reviewEntry{}}
}

func (c *reviewCache) get(key [sha256.Size]byte, now time.Time) (reviewEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		return reviewEntry{}, false
	}
	return e, true
}

// put records e. A full cache first drops expired entries, then arbitrary
// ones: a flood of distinct tokens may evict answers, which only costs
// another review, but never grows the cache past max.
func (c *reviewCache) put(key [sha256.Size]byte, e reviewEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.err != nil {
		e.expires = now.Add(c.refusedTTL)
	} else {
		e.expires = now.Add(c.ttl)
	}
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		for k, old := range c.entries {
			if !now.Before(old.expires) {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < c.max {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[key] = e
}

// len is the number of cached answers (tests).
func (c *reviewCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
