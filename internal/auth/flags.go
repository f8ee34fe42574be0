package auth

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/sshsig"
)

// defaultMaxConcurrentLeasesFlag is --default-max-concurrent-leases'
// default: enough for a CI job's parallel clusters, few enough that one
// caller cannot drain every Ready member of a pool. (Options'
// DefaultMaxConcurrentLeases has no default: zero is no cap.)
const defaultMaxConcurrentLeasesFlag = 10

// Flags are the operator's flags of authentication and of the defaults it
// puts in every Principal.
type Flags struct {
	// DefaultMaxTTL, DefaultMaxConcurrentLeases and ServiceAccountIssuers
	// are Options' fields of the same names.
	DefaultMaxTTL              time.Duration
	DefaultMaxConcurrentLeases int
	ServiceAccountIssuers      []string
	// Audience is Options.SSHAudience; empty: InstallationAudience (see
	// SSHAudience).
	Audience string
}

// Bind registers the flags on fs with their defaults.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.DurationVar(&f.DefaultMaxTTL, "default-max-ttl", DefaultMaxTTL, "Longest lease TTL, and longest single extension, under an AccessPolicy rule that sets no maxTtl; longer requests are clamped.")
	fs.IntVar(&f.DefaultMaxConcurrentLeases, "default-max-concurrent-leases", defaultMaxConcurrentLeasesFlag, "Most leases (Bound and Pending) one caller (policy and identity) may hold at once when its AccessPolicy rule sets no maxConcurrentLeases (the rule's own setting wins); beyond it the API answers 429 ConcurrentLeaseLimit. 0 removes the cap.")
	fs.Func("service-account-issuer", "Issuer (\"iss\") of the host API server's ServiceAccount tokens, as its own --service-account-issuer; repeat for several. Bearer JWTs of other issuers cost no TokenReview. Unset: read once from the host API server's /.well-known/openid-configuration, which names only the first issuer (list them all here while issuers are being migrated).", func(v string) error {
		f.ServiceAccountIssuers = append(f.ServiceAccountIssuers, v)
		return nil
	})
	fs.StringVar(&f.Audience, "api-audience", "", "Audience of this installation, published in GET /v1/status; SSH-signed requests must name it (default kobe:<namespace>:<namespace UID>). Give every replica the same value.")
}

// Validate refuses values the operator must not start with.
func (f Flags) Validate() error {
	switch {
	case f.DefaultMaxTTL <= 0:
		return errors.New("--default-max-ttl must be greater than zero")
	case f.DefaultMaxConcurrentLeases < 0 || f.DefaultMaxConcurrentLeases > math.MaxInt32:
		return errors.New("--default-max-concurrent-leases must be 0 (no cap) or a positive number")
	case f.Audience != "" && !sshsig.ValidAudience(f.Audience):
		return fmt.Errorf("--api-audience must be 1 to %d printable ASCII characters", sshsig.MaxAudienceLen)
	}
	return nil
}

// SSHAudience is --api-audience, or, unset, the installation's own audience
// read from namespace (InstallationAudience).
func (f Flags) SSHAudience(ctx context.Context, r client.Reader, namespace string) (string, error) {
	if f.Audience != "" {
		return f.Audience, nil
	}
	return InstallationAudience(ctx, r, namespace)
}
