package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
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
// groups. Successful reviews are reused for a few seconds, keyed by a hash
// of the token and the audiences.
func (a *Authenticator) serviceAccountClaims(ctx context.Context, pol *kobev1.AccessPolicy, cred *credential) (Claims, error) {
	if a.reviewer == nil {
		return nil, errors.New("ServiceAccount authentication is not configured on this server")
	}
	audiences := pol.Spec.Auth.ServiceAccount.Audiences
	key := reviewKey(cred.bearer, audiences)
	now := a.clock.Now()
	if c, ok := a.reviews.get(key, now); ok {
		return c, nil
	}
	res, err := a.reviewer.Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: cred.bearer, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		a.log.Error(err, "TokenReview failed", "policy", pol.Name)
		return nil, errors.New("could not review the ServiceAccount token; try again later")
	}
	st := res.Status
	if !st.Authenticated {
		a.log.V(1).Info("TokenReview refused the token", "policy", pol.Name, "reason", st.Error)
		return nil, errServiceAccountRefused
	}
	// An audience-aware API server returns the audiences it checked; one
	// that ignores spec.audiences returns none, and must not pass.
	if len(audiences) > 0 && !intersects(st.Audiences, audiences) {
		return nil, errors.New("ServiceAccount token is not issued for an accepted audience")
	}
	ns, name, ok := splitServiceAccount(st.User.Username)
	if !ok {
		return nil, errors.New("token does not belong to a ServiceAccount")
	}
	groups := make([]any, len(st.User.Groups))
	for i, g := range st.User.Groups {
		groups[i] = g
	}
	claims := Claims{
		"sub":            st.User.Username,
		"username":       st.User.Username,
		"namespace":      ns,
		"serviceaccount": name,
		"uid":            st.User.UID,
		"groups":         groups,
	}
	a.reviews.put(key, claims, now)
	return claims, nil
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

// reviewCache remembers successful reviews for ttl, at most maxReviews.
type reviewCache struct {
	ttl time.Duration

	mu      sync.Mutex
	entries map[[sha256.Size]byte]reviewEntry
}

type reviewEntry struct {
	claims  Claims
	expires time.Time
}

func newReviewCache(ttl time.Duration) *reviewCache {
	return &reviewCache{ttl: ttl, entries: map[[sha256.Size]byte]reviewEntry{}}
}

func (c *reviewCache) get(key [sha256.Size]byte, now time.Time) (Claims, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || !now.Before(e.expires) {
		return nil, false
	}
	return e.claims, true
}

func (c *reviewCache) put(key [sha256.Size]byte, claims Claims, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxReviews {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxReviews {
			return
		}
	}
	c.entries[key] = reviewEntry{claims: claims, expires: now.Add(c.ttl)}
}
