package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/truncate"
)

// The three ways a request fails. Errors wrap one of them with %w and a
// detail that is safe to show the caller: it never contains a credential.
var (
	// ErrNoCredentials: the request carries no Authorization header (401).
	ErrNoCredentials = errors.New("no credentials")
	// ErrInvalidCredentials: no policy could authenticate the credentials (401).
	ErrInvalidCredentials = errors.New("invalid credentials")
	// ErrNoMatchingRule: a policy authenticated the caller but none of the
	// rules of any such policy matched (403).
	ErrNoMatchingRule = errors.New("not authorised")
	// ErrBusy: the credentials could not be checked now because
	// Options.MaxConcurrentReviews TokenReviews are in flight (429).
	ErrBusy = errors.New("too many requests")
)

// Defaults of Options.
const (
	DefaultOIDCLeeway       = 30 * time.Second
	DefaultReviewCacheTTL   = 10 * time.Second
	DefaultRefusalCacheTTL  = 10 * time.Second
	DefaultHTTPTimeout      = 10 * time.Second
	defaultMethodsTimeout   = 5 * time.Second
	maxBearerLen            = 64 << 10
	defaultSecretKey        = "token"
	serviceAccountUserPrefx = "system:serviceaccount:"
)

// maxLoggedReason bounds an error's text in a log line: it may quote what a
// caller sent before it is known (go-jose names a token's algorithm,
// whatever its length).
const maxLoggedReason = 1024

// DefaultMaxConcurrentReviews is Options.MaxConcurrentReviews' default:
// reviews take milliseconds, so this serves bursts of new callers while a
// flood of forged tokens holds little of the host API server.
const DefaultMaxConcurrentReviews = 32

// Options configure an Authenticator. Reader and Namespace are required.
type Options struct {
	// Reader reads AccessPolicies and token Secrets, normally the manager's
	// cache (restricted to Namespace) so that every request reads them live
	// and cheaply.
	Reader client.Reader
	// Namespace holds the policies and their Secrets.
	Namespace string
	// TokenReviewer reviews ServiceAccount tokens against the host API
	// server: clientset.AuthenticationV1().TokenReviews(). Without it
	// serviceAccount policies authenticate nobody.
	TokenReviewer TokenReviewer
	// ServiceAccountIssuers are the "iss" values of the host API server's
	// ServiceAccount tokens (its --service-account-issuer values). A JWT
	// of any other issuer skips serviceAccount policies, costing no
	// TokenReview. Empty: learned from IssuerDiscovery.
	ServiceAccountIssuers []string
	// IssuerDiscovery is the host API server's REST client
	// (clientset.Discovery().RESTClient()), from which the issuer is read
	// once (DiscoverServiceAccountIssuer) when ServiceAccountIssuers is
	// empty. With neither, every JWT is reviewed.
	IssuerDiscovery rest.Interface
	// MaxConcurrentReviews bounds the TokenReviews in flight
	// (DefaultMaxConcurrentReviews); a request that needs one more is
	// refused at once with ErrBusy, without asking the host.
	MaxConcurrentReviews int
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// HTTPClient talks to OIDC issuers; it defaults to a client with a
	// DefaultHTTPTimeout timeout. Give it a timeout: key refreshes run in
	// the background with no other deadline.
	HTTPClient *http.Client
	// SSHAudience identifies this installation in SSH signatures (see
	// sshsig.ValidAudience); it is published in GET /v1/status. Without a
	// valid one, ssh policies authenticate nobody.
	SSHAudience string
	// SSHWindow is the accepted clock difference of SSH signatures
	// (sshsig.DefaultWindow).
	SSHWindow time.Duration
	// SSHNonces records the nonces of accepted SSH signatures. Replicas
	// must share it (replay.Store); when nil, a store in this process's
	// memory holding at most SSHMaxNonces is used, which only protects a
	// single replica.
	SSHNonces sshsig.NonceStore
	// SSHMaxNonces bounds the in-memory store (sshsig.DefaultMaxNonces).
	SSHMaxNonces int
	// OIDCLeeway is the clock skew allowed on exp and nbf (DefaultOIDCLeeway).
	OIDCLeeway time.Duration
	// ReviewCacheTTL is how long a successful TokenReview is reused; at
	// most (and by default) DefaultReviewCacheTTL, so a deleted
	// ServiceAccount loses access within seconds.
	ReviewCacheTTL time.Duration
	// RefusalCacheTTL is how long a token that TokenReview refused is
	// refused without asking again (DefaultRefusalCacheTTL, at most a
	// minute): a flood of one bad token costs one review per period.
	RefusalCacheTTL time.Duration
	// DefaultMaxTTL caps TTLs and extensions under rules that set no maxTtl
	// (DefaultMaxTTL when zero).
	DefaultMaxTTL time.Duration
	// DefaultMaxConcurrentLeases caps the leases one caller holds at once
	// under rules that set no maxConcurrentLeases; zero means no cap.
	DefaultMaxConcurrentLeases int32
	// Logger defaults to discarding.
	Logger logr.Logger
}

// Authenticator authenticates requests against the live AccessPolicies of
// one namespace. It is safe for concurrent use.
type Authenticator struct {
	reader    client.Reader
	namespace string
	clock     clock.PassiveClock
	log       logr.Logger
	leeway    time.Duration

	providers *providerCache
	ssh       *sshsig.Verifier // nil without a valid SSH audience
	reviews   *reviewCache
	// reviewFlight shares one TokenReview among concurrent requests that
	// carry the same token.
	reviewFlight singleflight.Group
	reviewSlots  *semaphore.Weighted
	reviewRate   *sourceLimiter
	reviewer     TokenReviewer
	issuers      *hostIssuers
	maxTTL       time.Duration
	maxLeases    int32
}

// NewAuthenticator returns an Authenticator for opts.
func NewAuthenticator(opts Options) *Authenticator {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if opts.OIDCLeeway <= 0 {
		opts.OIDCLeeway = DefaultOIDCLeeway
	}
	if opts.ReviewCacheTTL <= 0 || opts.ReviewCacheTTL > DefaultReviewCacheTTL {
		opts.ReviewCacheTTL = DefaultReviewCacheTTL
	}
	if opts.RefusalCacheTTL <= 0 || opts.RefusalCacheTTL > time.Minute {
		opts.RefusalCacheTTL = DefaultRefusalCacheTTL
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if opts.MaxConcurrentReviews <= 0 {
		opts.MaxConcurrentReviews = DefaultMaxConcurrentReviews
	}
	a := &Authenticator{
		reader:    opts.Reader,
		namespace: opts.Namespace,
		clock:     opts.Clock,
		log:       opts.Logger,
		leeway:    opts.OIDCLeeway,
		providers: newProviderCache(opts.HTTPClient, opts.Clock, opts.Logger),
		reviews:   newReviewCache(opts.ReviewCacheTTL, opts.RefusalCacheTTL, maxReviews),
		reviewer:  opts.TokenReviewer,
		issuers: &hostIssuers{static: slices.Clone(opts.ServiceAccountIssuers), rest: opts.IssuerDiscovery,
			clock: opts.Clock, log: opts.Logger},
		reviewSlots: semaphore.NewWeighted(int64(opts.MaxConcurrentReviews)),
		reviewRate:  newSourceLimiter(DefaultRefusalsPerSource, DefaultRefusalBurst),
		maxTTL:      opts.DefaultMaxTTL,
		maxLeases:   max(opts.DefaultMaxConcurrentLeases, 0),
	}
	nonces := opts.SSHNonces
	if nonces == nil {
		nonces = sshsig.NewMemoryNonceStore(opts.SSHMaxNonces, opts.Clock.Now)
	}
	var err error
	a.ssh, err = sshsig.NewVerifier(sshsig.VerifierOptions{
		Audience: opts.SSHAudience, Window: opts.SSHWindow, Nonces: nonces, Now: opts.Clock.Now,
	})
	if err != nil {
		a.log.Info("SSH signatures are refused: the server has no valid audience", "reason", err.Error())
	}
	return a
}

// Audience is the audience SSH signatures must name, "" when SSH is not
// configured.
func (a *Authenticator) Audience() string {
	if a.ssh == nil {
		return ""
	}
	return a.ssh.Audience()
}

// MethodOf names the authentication method a policy configures, or "" for
// none.
func MethodOf(p *kobev1.AccessPolicy) string {
	a := p.Spec.Auth
	switch {
	case a.OIDC != nil:
		return MethodOIDC
	case a.SSH != nil:
		return MethodSSH
	case a.Token != nil:
		return MethodToken
	case a.ServiceAccount != nil:
		return MethodServiceAccount
	}
	return ""
}

// Methods lists the methods of the policies that exist now, sorted.
func (a *Authenticator) Methods() []string {
	ctx, cancel := context.WithTimeout(context.Background(), defaultMethodsTimeout)
	defer cancel()
	policies, err := a.policies(ctx)
	if err != nil {
		a.log.Error(err, "Listing access policies failed")
		return nil
	}
	var out []string
	for i := range policies {
		if m := MethodOf(&policies[i]); m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// credential is what the request presented, plus results shared by the
// policies that look at it during one Authenticate call.
type credential struct {
	bearer string
	jwt    bool
	issuer string // unverified "iss", used to route only
	ssh    *sshsig.Header

	sshChecked bool
	sshErr     error
	oidc       map[string]*oidcResult // by issuer
	// hostIssued: the token names an issuer of the host's ServiceAccount
	// tokens, or they are unknown (checked once, for the first
	// serviceAccount policy).
	hostChecked, hostIssued bool
	// source is the caller's address: uncached TokenReviews are bounded
	// per source.
	source string
}

func (c *credential) describe() string {
	switch {
	case c.ssh != nil:
		return "SSH signatures"
	case c.jwt && c.issuer != "":
		iss := c.issuer
		if len(iss) > 128 {
			iss = iss[:128] + "..."
		}
		return fmt.Sprintf("tokens of issuer %q", iss)
	case c.jwt:
		return "this JWT"
	}
	return "this bearer token"
}

// Authenticate reads the credentials of r (body is the already-read request
// body, which SSH signatures cover) and returns the Principal of the first
// policy, by name, that authenticates them and has a matching rule.
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request, body []byte) (*Principal, error) {
	return a.AuthenticateSum(ctx, r, sha256.Sum256(body))
}

// AuthenticateSum is Authenticate for a request whose body is streamed after
// it: bodySum is the SHA-256 the caller declared for it (and signed, with an
// SSH signature), which the handler checks once it has read the body.
func (a *Authenticator) AuthenticateSum(ctx context.Context, r *http.Request, bodySum [sha256.Size]byte) (*Principal, error) {
	cred, err := readCredential(r)
	if err != nil {
		return nil, err
	}
	cred.source = sourceOf(r)
	policies, err := a.policies(ctx)
	if err != nil {
		return nil, err
	}
	a.providers.retain(policies)

	var refused, denied []string
	authenticated, tried, busy := false, false, false
	for i := range policies {
		pol := &policies[i]
		method := MethodOf(pol)
		if !applies(pol, method, cred) || (method == MethodServiceAccount && !a.hostIssued(ctx, cred)) {
			continue
		}
		tried = true
		claims, err := a.authenticateWith(ctx, pol, method, cred, r, bodySum)
		if err != nil {
			a.log.V(1).Info("Credentials refused by policy", "policy", pol.Name, "method", method, "reason", truncate.Log(err.Error(), maxLoggedReason))
			refused = appendOnce(refused, err.Error())
			busy = busy || errors.Is(err, ErrBusy)
			continue
		}
		authenticated = true
		idx := firstRule(method, pol.Spec.Rules, claims)
		identity, idErr := RenderIdentity(pol.Spec.Identity, claims)
		if idx < 0 {
			who := "the caller"
			if idErr == nil {
				who = fmt.Sprintf("%q", identity)
			}
			denied = append(denied, fmt.Sprintf("no rule of policy %s matches %s", pol.Name, who))
			continue
		}
		if idErr != nil {
			denied = append(denied, fmt.Sprintf("policy %s: %v", pol.Name, idErr))
			continue
		}
		p := &Principal{
			Identity:                   identity,
			Policy:                     pol.Name,
			Method:                     method,
			Rule:                       *pol.Spec.Rules[idx].DeepCopy(),
			RuleIndex:                  idx,
			DefaultMaxTTL:              a.maxTTL,
			DefaultMaxConcurrentLeases: a.maxLeases,
		}
		a.log.V(1).Info("Authenticated", AuditFields(p)...)
		return p, nil
	}
	switch {
	case authenticated:
		return nil, fmt.Errorf("%w: %s", ErrNoMatchingRule, strings.Join(denied, "; "))
	case busy:
		return nil, fmt.Errorf("%w: the server is checking as many ServiceAccount tokens as it may at once; retry in a second", ErrBusy)
	case !tried:
		return nil, fmt.Errorf("%w: no access policy accepts %s", ErrInvalidCredentials, cred.describe())
	}
	return nil, fmt.Errorf("%w: %s", ErrInvalidCredentials, strings.Join(refused, "; "))
}

// applies says whether pol looks at cred at all: SSH signatures go to ssh
// policies; bearer tokens to token policies and, when JWT-shaped, to
// serviceAccount policies and the oidc policies of the token's issuer.
func applies(pol *kobev1.AccessPolicy, method string, cred *credential) bool {
	if !pol.DeletionTimestamp.IsZero() {
		return false
	}
	if cred.ssh != nil {
		return method == MethodSSH
	}
	switch method {
	case MethodToken:
		return true
	case MethodServiceAccount:
		return cred.jwt
	case MethodOIDC:
		// An issuer that is not https (loopback aside) is never contacted:
		// the policy is invalid, whatever its status says yet.
		return cred.jwt && cred.issuer != "" && cred.issuer == pol.Spec.Auth.OIDC.Issuer && ValidateIssuer(cred.issuer) == nil
	}
	return false
}

// hostIssued reports whether cred may be a token of the host API server:
// its unverified "iss" is the host's ServiceAccount issuer, or that issuer
// is not known. Only then is a TokenReview worth its cost.
func (a *Authenticator) hostIssued(ctx context.Context, cred *credential) bool {
	if !cred.hostChecked {
		ok, known := a.issuers.issued(ctx, cred.issuer)
		cred.hostChecked, cred.hostIssued = true, ok || !known
	}
	return cred.hostIssued
}

func (a *Authenticator) authenticateWith(ctx context.Context, pol *kobev1.AccessPolicy, method string, cred *credential, r *http.Request, bodySum [sha256.Size]byte) (Claims, error) {
	switch method {
	case MethodOIDC:
		return a.oidcClaims(ctx, pol, cred)
	case MethodSSH:
		return a.sshClaims(ctx, pol, cred, r, bodySum)
	case MethodToken:
		return a.tokenClaims(ctx, pol, cred)
	case MethodServiceAccount:
		return a.serviceAccountClaims(ctx, pol, cred)
	}
	return nil, errors.New("policy has no authentication method")
}

// policies lists the namespace's AccessPolicies sorted by name.
func (a *Authenticator) policies(ctx context.Context) ([]kobev1.AccessPolicy, error) {
	if a.reader == nil {
		return nil, errors.New("authenticator has no Reader")
	}
	var list kobev1.AccessPolicyList
	if err := a.reader.List(ctx, &list, client.InNamespace(a.namespace)); err != nil {
		return nil, fmt.Errorf("reading access policies: %w", err)
	}
	slices.SortFunc(list.Items, func(x, y kobev1.AccessPolicy) int { return strings.Compare(x.Name, y.Name) })
	return list.Items, nil
}

// readCredential parses the Authorization header.
func readCredential(r *http.Request) (*credential, error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 || strings.TrimSpace(values[0]) == "" {
		return nil, fmt.Errorf("%w: send Authorization: Bearer <token> or a KobeSSH signature", ErrNoCredentials)
	}
	if len(values) > 1 {
		return nil, fmt.Errorf("%w: more than one Authorization header", ErrInvalidCredentials)
	}
	value := strings.TrimSpace(values[0])
	if sshsig.HasScheme(value) {
		h, err := sshsig.ParseHeader(value)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidCredentials, err)
		}
		return &credential{ssh: h}, nil
	}
	scheme, token, _ := strings.Cut(value, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return nil, fmt.Errorf("%w: unsupported Authorization scheme; use Bearer or %s", ErrInvalidCredentials, sshsig.Scheme)
	}
	token = strings.TrimSpace(token)
	switch {
	case token == "":
		return nil, fmt.Errorf("%w: empty bearer token", ErrInvalidCredentials)
	case len(token) > maxBearerLen:
		return nil, fmt.Errorf("%w: bearer token longer than %d bytes", ErrInvalidCredentials, maxBearerLen)
	}
	c := &credential{bearer: token}
	c.jwt, c.issuer = jwtIssuer(token)
	return c, nil
}

// jwtIssuer reports whether token has the shape of a JWT (three dot-separated
// base64url parts) and the "iss" its payload claims. Nothing here is
// verified: the issuer only chooses which oidc policies verify the token.
func jwtIssuer(token string) (isJWT bool, issuer string) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false, ""
	}
	for _, p := range parts {
		if strings.ContainsFunc(p, notBase64URL) {
			return false, ""
		}
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return false, ""
	}
	var claims struct {
		Issuer any `json:"iss"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return true, ""
	}
	iss, _ := claims.Issuer.(string)
	return true, iss
}

func notBase64URL(r rune) bool {
	isAlnum := r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
	return !isAlnum && r != '-' && r != '_' && r != '='
}

func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}
