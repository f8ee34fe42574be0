package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Bounds of learning the host's ServiceAccount issuer.
const (
	// issuerRetry spaces discovery attempts after a failure.
	issuerRetry = 30 * time.Second
	// issuerTimeout bounds one discovery request.
	issuerTimeout = 5 * time.Second
)

// hostIssuers knows the "iss" of the host API server's ServiceAccount
// tokens: the configured list, else the issuer its discovery document
// names, learned once. A JWT of another issuer cannot pass a TokenReview,
// so it is not worth one.
type hostIssuers struct {
	static []string
	rest   rest.Interface
	clock  clock.PassiveClock
	log    logr.Logger

	flight  singleflight.Group
	mu      sync.Mutex
	learned string
	failed  time.Time // of the last failed attempt
}

// issued reports whether iss is one of the host's issuers. known is false
// while the issuers are unknown (no list, and discovery failed less than
// issuerRetry ago or is not configured): then every JWT is reviewed, within
// the review semaphore.
func (h *hostIssuers) issued(ctx context.Context, iss string) (ok, known bool) {
	if len(h.static) > 0 {
		return slices.Contains(h.static, iss), true
	}
	if h.rest == nil {
		return false, false
	}
	h.mu.Lock()
	learned, failed := h.learned, h.failed
	h.mu.Unlock()
	if learned == "" {
		if !failed.IsZero() && h.clock.Since(failed) < issuerRetry {
			return false, false
		}
		v, _, _ := h.flight.Do("", func() (any, error) { return h.discover(ctx), nil })
		if learned = v.(string); learned == "" {
			return false, false
		}
	}
	return iss == learned, true
}

// discover reads the issuer from the host API server's discovery document,
// on a context the first caller cannot cancel for the others.
func (h *hostIssuers) discover(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), issuerTimeout)
	defer cancel()
	iss, err := DiscoverServiceAccountIssuer(ctx, h.rest)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failed = h.clock.Now()
		h.log.Error(err, "Learning the host's ServiceAccount issuer failed; ServiceAccount tokens of any issuer are reviewed until it is known", "retryIn", issuerRetry)
		return ""
	}
	h.learned = iss
	h.log.Info("Learned the host's ServiceAccount issuer", "issuer", iss)
	return iss
}

// DiscoverServiceAccountIssuer reads the issuer of the API server's
// ServiceAccount tokens from its /.well-known/openid-configuration, through
// c (a clientset's Discovery().RESTClient()). Kubernetes lets every
// ServiceAccount read it (ClusterRole system:service-account-issuer-discovery).
func DiscoverServiceAccountIssuer(ctx context.Context, c rest.Interface) (string, error) {
	raw, err := c.Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the API server's /.well-known/openid-configuration: %w", err)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "", fmt.Errorf("decoding the API server's /.well-known/openid-configuration: %w", err)
	}
	if doc.Issuer == "" {
		return "", errors.New("the API server's /.well-known/openid-configuration names no issuer")
	}
	return doc.Issuer, nil
}
