// Package apiclienttest is an in-memory fake of kobe's HTTP API (v1) for unit
// tests of the client and the CLI. It follows the wire contract (routes, JSON
// fields, status codes, reasons; internal/contract runs the same table
// against it and against the real server) but none of the operator's
// behaviour beyond that.
package apiclienttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Token is the bearer token the fake accepts by default, as identity "tester".
const Token = "test-token"

// MaxBodyBytes bounds request bodies (413 beyond it).
const MaxBodyBytes = 64 << 10

// MaxImageBytes bounds the image archives of POST /v1/leases/{id}/images
// (413 beyond it).
const MaxImageBytes = 1 << 20

// DefaultSSHAudience is the audience a fake publishes unless told otherwise.
const DefaultSSHAudience = "kobe:fake"

// Server is a running fake. Set its exported fields with New's options;
// once it runs, change them only under Lock/Unlock.
type Server struct {
	*httptest.Server

	// Authenticate decides who the caller is; ok=false answers 401. The
	// default accepts "Authorization: Bearer <Token>" as identity "tester"
	// and the tokens of WithIdentity.
	Authenticate func(r *http.Request, body []byte) (identity string, ok bool)
	// PendingPolls is how many GETs a new lease answers Pending before it
	// binds; 0 binds at once (201) when the pool has a Ready member and no
	// queue, else the lease waits until a test calls AddReady.
	PendingPolls int
	// EndWhilePending, when set, ends a Pending lease with this phase (and
	// reason "queue timeout") instead of binding it.
	EndWhilePending string
	// MaxExtensions caps extensions per lease (default 2).
	MaxExtensions int
	// MaxConcurrentLeases answers 429 beyond it for identities without a
	// limit of their own; 0 means no limit.
	MaxConcurrentLeases int
	// IdleTimeout, when set, is every new lease's idle timeout, as a pool
	// or policy with idleTimeout gives the real server's Proxy leases.
	IdleTimeout time.Duration
	// SSHAudience is published in GET /v1/status and required in the
	// signatures WithSSHKeys accepts (DefaultSSHAudience).
	SSHAudience string
	// MemberNodes is how many nodes every member has, which hold the images
	// loaded into it (default 1); 0 answers ImagesUnsupported, as a sim
	// member does.
	MemberNodes int

	mu          sync.Mutex
	now         func() time.Time
	pools       []wire.Pool
	heartbeats  []string
	unavailable map[string]string
	identities  map[string]Identity
	leases      map[string]*lease
	order       []string
	nextID      int
	requests    []string
	released    []string
	loads       []Load
}

// Load is an image archive the fake accepted.
type Load struct {
	// Lease is the lease's ID.
	Lease string
	// ContentDigest is the request's header, which matched the body.
	ContentDigest string
	// Body is the archive as received.
	Body []byte
}

// Identity is a caller of the fake, known by its bearer token.
type Identity struct {
	// Name is the identity the fake reports as requester.
	Name string
	// Pools are path.Match patterns of the pools it may use; nil: all.
	Pools []string
	// MaxConcurrentLeases caps its active leases; 0: the server's limit.
	MaxConcurrentLeases int
}

type lease struct {
	wire.Lease
	owner string
	ttl   time.Duration
	// waiting counts the GETs left before a PendingPolls lease binds; -1
	// for a lease that waits for a Ready member.
	waiting int
}

// Option sets up a Server before it starts serving.
type Option func(*Server)

// WithPendingPolls makes new leases answer Pending for n GETs.
func WithPendingPolls(n int) Option { return func(s *Server) { s.PendingPolls = n } }

// WithIdleTimeout gives every new lease idle timeout d.
func WithIdleTimeout(d time.Duration) Option { return func(s *Server) { s.IdleTimeout = d } }

// WithEndWhilePending ends Pending leases with phase instead of binding them.
func WithEndWhilePending(phase string) Option { return func(s *Server) { s.EndWhilePending = phase } }

// WithMemberNodes gives every member n nodes; 0: none, so loading images
// answers ImagesUnsupported.
func WithMemberNodes(n int) Option { return func(s *Server) { s.MemberNodes = n } }

// WithMaxExtensions caps extensions per lease.
func WithMaxExtensions(n int) Option { return func(s *Server) { s.MaxExtensions = n } }

// WithMaxConcurrentLeases caps the active leases of an identity.
func WithMaxConcurrentLeases(n int) Option { return func(s *Server) { s.MaxConcurrentLeases = n } }

// WithPool adds a pool; its Ready counter is how many leases bind at once.
func WithPool(p wire.Pool) Option { return func(s *Server) { s.pools = append(s.pools, p) } }

// WithUnavailablePool adds a pool that answers 503 with reason (one of
// wire.ReasonPoolBeingDeleted, ReasonBackendUnavailable, ReasonPoolQuarantined).
func WithUnavailablePool(p wire.Pool, reason string) Option {
	return func(s *Server) {
		s.pools = append(s.pools, p)
		s.unavailable[p.Name] = reason
	}
}

// WithIdentity accepts "Authorization: Bearer <token>" as id.
func WithIdentity(token string, id Identity) Option {
	return func(s *Server) { s.identities[token] = id }
}

// New starts a fake with one fixed pool "ci-small" (three Ready members,
// default TTL 1h) plus what opts set up, and stops it when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		MaxExtensions: 2,
		SSHAudience:   DefaultSSHAudience,
		MemberNodes:   1,
		now:           func() time.Time { return time.Date(2026, 4, 9, 14, 30, 0, 0, time.UTC) },
		leases:        map[string]*lease{},
		unavailable:   map[string]string{},
		identities:    map[string]Identity{Token: {Name: "tester"}},
		pools: []wire.Pool{{
			Name: "ci-small", Phase: "Healthy", Ready: 3,
			Policy: wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: 3},
		}},
	}
	s.Authenticate = func(r *http.Request, _ []byte) (string, bool) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		id, known := s.identities[tok]
		return id.Name, ok && known
	}
	for _, opt := range opts {
		opt(s)
	}
	s.Server = httptest.NewServer(s.handler())
	t.Cleanup(s.Close)
	return s
}

// Lock and Unlock guard changes to the exported fields while the server runs.
func (s *Server) Lock()   { s.mu.Lock() }
func (s *Server) Unlock() { s.mu.Unlock() }

// Requests returns "METHOD /path" of every request so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Released returns the IDs of the caller's own leases released with DELETE,
// in order.
func (s *Server) Released() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.released)
}

// Loads returns the image archives accepted so far, in order.
func (s *Server) Loads() []Load {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loads)
}

// Lease returns a copy of the lease with id as the server holds it.
func (s *Server) Lease(id string) (wire.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return wire.Lease{}, false
	}
	return s.render(l), true
}

// AddReady gives pool n more Ready members and binds its queue in order.
func (s *Server) AddReady(pool string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pool(pool)
	if p == nil {
		return
	}
	p.Ready += n
	for _, id := range s.order {
		if l := s.leases[id]; p.Ready > 0 && l.Pool == pool && l.Phase == wire.PhasePending && l.waiting < 0 {
			s.bind(l)
		}
	}
}

// Kubeconfig is the kubeconfig the fake hands out for a lease: an https
// cluster and a bearer-token user, as the CLI requires.
func Kubeconfig(id string) string {
	return "apiVersion: v1\nkind: Config\ncurrent-context: " + id + "\n" +
		"clusters:\n- name: " + id + "\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority-data: ZmFrZSBDQQ==\n" +
		"users:\n- name: " + id + "\n  user:\n    token: token-" + id + "\n" +
		"contexts:\n- name: " + id + "\n  context:\n    cluster: " + id + "\n    user: " + id + "\n"
}

// routes maps each route of the API to its methods, for 405 answers.
var routes = map[string][]string{
	"/v1/status":                {http.MethodGet},
	"/v1/whoami":                {http.MethodGet},
	"/v1/leases":                {http.MethodGet, http.MethodPost},
	"/v1/leases/{id}":           {http.MethodGet, http.MethodPatch, http.MethodDelete},
	"/v1/leases/{id}/heartbeat": {http.MethodPost},
	"/v1/leases/{id}/images":    {http.MethodPost},
	"/v1/pools":                 {http.MethodGet},
	"/v1/pools/{name}":          {http.MethodGet},
	"/v1/pools/{name}/leases":   {http.MethodGet},
	wire.LoginDiscoveryPath:     {http.MethodGet},
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("GET /v1/whoami", s.authed(s.whoami))
	mux.HandleFunc("POST /v1/leases", s.authed(s.createLease))
	mux.HandleFunc("GET /v1/leases", s.authed(s.listLeases))
	mux.HandleFunc("GET /v1/leases/{id}", s.authed(s.getLease))
	mux.HandleFunc("DELETE /v1/leases/{id}", s.authed(s.releaseLease))
	mux.HandleFunc("PATCH /v1/leases/{id}", s.authed(s.extendLease))
	mux.HandleFunc("POST /v1/leases/{id}/heartbeat", s.authed(s.heartbeat))
	mux.HandleFunc("POST /v1/leases/{id}/images", s.loadImages)
	mux.HandleFunc("GET /v1/pools", s.authed(s.listPools))
	mux.HandleFunc("GET /v1/pools/{name}", s.authed(s.getPool))
	mux.HandleFunc("GET /v1/pools/{name}/leases", s.authed(s.listPoolLeases))
	mux.HandleFunc("GET "+wire.LoginDiscoveryPath, func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, wire.ReasonLoginNotConfigured, "login not configured", "this fake publishes no login for people")
	})
	known := http.NewServeMux()
	for pattern, methods := range routes {
		known.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			writeError(w, http.StatusMethodNotAllowed, wire.ReasonMethodNotAllowed, "method not allowed",
				fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(methods, ", ")))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := known.Handler(r); pattern != "" {
			known.ServeHTTP(w, r)
			return
		}
		writeError(w, http.StatusNotFound, wire.ReasonNotFound, "not found", fmt.Sprintf("no route %s %s; see GET /v1/status", r.Method, r.URL.Path))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

type authedHandler func(w http.ResponseWriter, r *http.Request, identity string, body []byte)

func (s *Server) authed(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, wire.ReasonBodyTooLarge, "request body too large", fmt.Sprintf("the body must be at most %d bytes", MaxBodyBytes))
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		identity, ok := s.Authenticate(r, body)
		if !ok {
			writeError(w, http.StatusUnauthorized, wire.ReasonUnauthorized, "unauthorized", "send valid credentials")
			return
		}
		h(w, r, identity, body)
	}
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes))
	s.mu.Lock()
	defer s.mu.Unlock()
	st := wire.Status{Version: "v0.0.0-fake", Auth: wire.StatusAuth{Methods: []string{"token"}, Audience: s.SSHAudience}}
	if identity, ok := s.Authenticate(r, body); ok {
		st.Pools = s.allowedPools(identity)
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, identity string, _ []byte) {
	names := []string{}
	for _, p := range s.allowedPools(identity) {
		names = append(names, p.Name)
	}
	writeJSON(w, http.StatusOK, wire.WhoAmI{
		Identity: identity, Policy: "fake-policy", Method: "token", Pools: names,
		MaxTTL: "2h", MaxConcurrentLeases: s.leaseLimit(identity), MaxExtensions: s.MaxExtensions,
	})
}

func (s *Server) identity(name string) Identity {
	for _, id := range s.identities {
		if id.Name == name {
			return id
		}
	}
	return Identity{Name: name}
}

func (s *Server) allowed(identity, pool string) bool {
	patterns := s.identity(identity).Pools
	if patterns == nil {
		return true
	}
	return slices.ContainsFunc(patterns, func(p string) bool {
		ok, err := path.Match(p, pool)
		return err == nil && ok
	})
}

func (s *Server) leaseLimit(identity string) int {
	if n := s.identity(identity).MaxConcurrentLeases; n > 0 {
		return n
	}
	return s.MaxConcurrentLeases
}

func (s *Server) pool(name string) *wire.Pool {
	for i := range s.pools {
		if s.pools[i].Name == name {
			return &s.pools[i]
		}
	}
	return nil
}

// usablePool answers 403 for a pool the caller may not use (whether or not
// it exists), then 404 for a missing one.
func (s *Server) usablePool(w http.ResponseWriter, identity, name string) *wire.Pool {
	if !s.allowed(identity, name) {
		writeError(w, http.StatusForbidden, wire.ReasonPoolNotAllowed, "pool not allowed", fmt.Sprintf("your policy does not allow pool %q", name))
		return nil
	}
	p := s.pool(name)
	if p == nil {
		writeError(w, http.StatusNotFound, wire.ReasonPoolNotFound, "pool not found", fmt.Sprintf("no pool %q: list pools with GET /v1/pools", name))
	}
	return p
}

func (s *Server) allowedPools(identity string) []wire.Pool {
	out := []wire.Pool{}
	for _, p := range s.pools {
		if s.allowed(identity, p.Name) {
			out = append(out, s.renderPool(p))
		}
	}
	return out
}

// renderPool adds the leases queued in the fake to the pool's QueueDepth
// (which WithPool may set for leases the fake does not hold).
func (s *Server) renderPool(p wire.Pool) wire.Pool {
	for _, l := range s.leases {
		if l.Pool == p.Name && l.Phase == wire.PhasePending {
			p.QueueDepth++
		}
	}
	return p
}

// decodeStrict decodes a JSON object and refuses unknown fields.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the body is not valid JSON for this route: %w", err)
	}
	if dec.More() {
		return errors.New("the body has data after the JSON object")
	}
	return nil
}

func (s *Server) createLease(w http.ResponseWriter, _ *http.Request, identity string, body []byte) {
	var req wire.CreateLeaseRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", err.Error())
		return
	}
	if req.Alias != "" {
		if err := wire.ValidateAlias(req.Alias); err != nil {
			writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", err.Error())
			return
		}
	}
	switch req.CleanupMode {
	case "", wire.CleanupStandard, wire.CleanupVerifiedDestroy:
	default:
		writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", fmt.Sprintf("cleanupMode must be Standard or VerifiedDestroy, got %q", req.CleanupMode))
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", fmt.Sprintf("ttl %q is not a positive duration such as 30m", req.TTL))
			return
		}
		ttl = d
	}
	p := s.usablePool(w, identity, req.PoolName())
	if p == nil {
		return
	}
	if reason, ok := s.unavailable[p.Name]; ok {
		w.Header().Set("Retry-After", wire.UnavailableRetryAfter)
		writeError(w, http.StatusServiceUnavailable, reason, "pool unavailable", fmt.Sprintf("pool %q cannot serve a lease now (%s); try again later", p.Name, reason))
		return
	}
	if req.CleanupMode == wire.CleanupVerifiedDestroy {
		// The fake's members are simulated: nothing of them can be proven gone.
		writeError(w, http.StatusUnprocessableEntity, wire.ReasonCleanupModeUnsupported, "cleanupMode VerifiedDestroy is not supported by the pool's backend",
			fmt.Sprintf("pool %s cannot prove a member destroyed; use cleanupMode Standard", p.Name))
		return
	}
	if ttl == 0 {
		ttl, _ = time.ParseDuration(p.Policy.TTL)
	}
	var heartbeat time.Duration
	if req.HeartbeatTimeout != "" {
		d, err := time.ParseDuration(req.HeartbeatTimeout)
		if err != nil || d < wire.MinHeartbeatTimeout || d > wire.MaxHeartbeatTimeout {
			writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", fmt.Sprintf("heartbeat_timeout %q must be a duration between 10s and 24h", req.HeartbeatTimeout))
			return
		}
		heartbeat = d
	}
	if req.Alias != "" && s.activeByAlias(identity, req.Alias) != nil {
		writeError(w, http.StatusConflict, wire.ReasonAliasInUse, "alias in use", fmt.Sprintf("you already hold an active lease with alias %q; release it or choose another alias", req.Alias))
		return
	}
	if limit := s.leaseLimit(identity); limit > 0 && s.activeLeases(identity) >= limit {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusTooManyRequests, wire.ReasonConcurrentLeaseLimit, "concurrent lease limit reached", "release a lease first")
		return
	}
	queued := slices.ContainsFunc(s.order, func(id string) bool { return s.leases[id].Pool == p.Name && s.leases[id].Phase == wire.PhasePending })
	if bindable := s.PendingPolls == 0 && p.Ready > 0 && !queued; !bindable && s.leaseLimit(identity) == 0 && s.waitingLeases(identity) >= maxQueuedPerOwner {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusTooManyRequests, wire.ReasonQueuedLeaseLimit, "queued lease limit reached", "wait for one of your leases to be bound or release one")
		return
	}
	s.nextID++
	l := &lease{
		Lease: wire.Lease{
			ID: fmt.Sprintf("lease-%012x", s.nextID), Alias: req.Alias, Phase: wire.PhasePending,
			Pool: p.Name, Profile: p.Name, EffectiveTTL: wire.FormatTTL(ttl),
			MaxExtensions: s.MaxExtensions, Requester: identity, CreatedAt: wire.WireTime(s.now()),
		},
		owner: identity, ttl: ttl, waiting: s.PendingPolls,
	}
	if heartbeat > 0 {
		l.HeartbeatTimeout = wire.FormatTTL(heartbeat)
		l.HeartbeatEndsAt = wire.WireTime(s.now().Add(heartbeat))
	}
	if s.IdleTimeout > 0 {
		l.IdleTimeout = wire.FormatTTL(s.IdleTimeout)
		l.IdleEndsAt = wire.WireTime(s.now().Add(s.IdleTimeout))
	}
	s.leases[l.ID] = l
	s.order = append(s.order, l.ID)
	if l.waiting == 0 && p.Ready > 0 && !queued {
		s.bind(l)
		writeJSON(w, http.StatusCreated, s.render(l))
		return
	}
	if l.waiting == 0 {
		l.waiting = -1
	}
	writeJSON(w, http.StatusAccepted, s.render(l))
}

func (s *Server) bind(l *lease) {
	now := s.now()
	l.Phase = wire.PhaseBound
	l.ClusterName = "pool-" + l.Pool + "-0"
	l.BoundAt = wire.WireTime(now)
	l.ExpiresAt = wire.WireTime(now.Add(l.ttl))
	l.Kubeconfig = Kubeconfig(l.ID)
	if p := s.pool(l.Pool); p != nil {
		p.Leased++
		p.Ready = max(p.Ready-1, 0)
	}
}

// render is l as the API shows it, with its live queue position.
func (s *Server) render(l *lease) wire.Lease {
	out := l.Lease
	out.QueuePosition = 0
	if l.Phase == wire.PhasePending {
		for _, id := range s.order {
			o := s.leases[id]
			if o.Pool == l.Pool && o.Phase == wire.PhasePending {
				out.QueuePosition++
			}
			if id == l.ID {
				break
			}
		}
	}
	return out
}

func (s *Server) activeLeases(identity string) int {
	n := 0
	for _, l := range s.leases {
		if l.owner == identity && !wire.PhaseEnded(l.Phase) {
			n++
		}
	}
	return n
}

// maxQueuedPerOwner is the real server's default cap on the leases one
// caller without a limit of its own may have waiting.
const maxQueuedPerOwner = 10

func (s *Server) waitingLeases(identity string) int {
	n := 0
	for _, l := range s.leases {
		if l.owner == identity && l.Phase == wire.PhasePending {
			n++
		}
	}
	return n
}

func (s *Server) activeByAlias(identity, alias string) *lease {
	for _, l := range s.leases {
		if l.owner == identity && l.Alias == alias && !wire.PhaseEnded(l.Phase) {
			return l
		}
	}
	return nil
}

// resolve finds the caller's lease by id or alias (the active one, else the
// most recent). It answers 400 for a malformed reference and returns nil
// (without answering) when the caller holds no such lease.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request, identity string) (*lease, bool) {
	ref := r.PathValue("id")
	if err := wire.ValidateLeaseRef(ref); err != nil {
		writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", err.Error())
		return nil, false
	}
	if wire.IsLeaseID(ref) {
		l, ok := s.leases[ref]
		if !ok || l.owner != identity {
			return nil, true
		}
		return l, true
	}
	if l := s.activeByAlias(identity, ref); l != nil {
		return l, true
	}
	for _, id := range slices.Backward(s.order) {
		if l := s.leases[id]; l.owner == identity && l.Alias == ref {
			return l, true
		}
	}
	return nil, true
}

// own resolves the caller's lease, or answers 400 or 404 (another
// identity's lease is as unknown as a missing one).
func (s *Server) own(w http.ResponseWriter, r *http.Request, identity string) *lease {
	l, ok := s.resolve(w, r, identity)
	if ok && l == nil {
		writeError(w, http.StatusNotFound, wire.ReasonLeaseNotFound, "lease not found", fmt.Sprintf("you hold no lease %q", r.PathValue("id")))
	}
	return l
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	var f wire.LeaseFilter
	for key, vals := range r.URL.Query() {
		switch {
		case len(vals) != 1:
			writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "query parameter "+key+" given more than once")
			return
		case key == "alias":
			if err := wire.ValidateAlias(vals[0]); err != nil {
				writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", err.Error())
				return
			}
			f.Alias = vals[0]
		case key == "pool":
			f.Pool = vals[0]
		default:
			writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "unknown query parameter "+key)
			return
		}
	}
	out := []wire.Lease{}
	for _, id := range s.order {
		l := s.leases[id]
		if l.owner == identity && !wire.PhaseEnded(l.Phase) && (f.Alias == "" || l.Alias == f.Alias) && (f.Pool == "" || l.Pool == f.Pool) {
			out = append(out, withoutKubeconfig(s.render(l)))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getLease(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	l := s.own(w, r, identity)
	if l == nil {
		return
	}
	if l.Phase == wire.PhasePending && l.waiting > 0 {
		l.waiting--
		if l.waiting == 0 {
			if s.EndWhilePending != "" {
				l.Phase, l.Reason = s.EndWhilePending, "queue timeout"
			} else {
				s.bind(l)
			}
		}
	}
	writeJSON(w, http.StatusOK, s.render(l))
}

// releaseLease answers 204 whether or not the caller holds the lease, so
// that it is idempotent for the owner and tells nobody else anything.
func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	l, ok := s.resolve(w, r, identity)
	if !ok {
		return
	}
	if l != nil {
		s.released = append(s.released, l.ID)
		if !wire.PhaseEnded(l.Phase) {
			if l.Phase == wire.PhaseBound {
				if p := s.pool(l.Pool); p != nil {
					p.Leased--
				}
			}
			l.Phase, l.Reason, l.Kubeconfig = wire.PhaseReleased, "released by its holder", ""
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// heartbeat renews a lease with a heartbeat timeout, as the real server
// does; Heartbeats counts them.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	l := s.own(w, r, identity)
	if l == nil {
		return
	}
	switch {
	case l.HeartbeatTimeout == "":
		writeError(w, http.StatusConflict, wire.ReasonHeartbeatNotEnabled, "lease takes no heartbeats", "lease "+l.ID+" was created without heartbeat_timeout")
		return
	case wire.PhaseEnded(l.Phase):
		writeError(w, http.StatusGone, wire.ReasonLeaseEnded, "lease has ended", "lease "+l.ID+" is "+l.Phase)
		return
	}
	d, _ := time.ParseDuration(l.HeartbeatTimeout)
	l.HeartbeatEndsAt = wire.WireTime(s.now().Add(d))
	s.heartbeats = append(s.heartbeats, l.ID)
	writeJSON(w, http.StatusOK, withoutKubeconfig(s.render(l)))
}

// Heartbeats lists the lease IDs of the heartbeats received, in order.
func (s *Server) Heartbeats() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.heartbeats...)
}

// loadImages takes an image archive of at most MaxImageBytes whose
// Content-Digest is its SHA-256, and names the images its manifest.json
// (docker-archive) or index.json (OCI) names; it records the archive and
// loads nothing anywhere. Unlike the real server it reads the body before
// it authenticates the caller (so WithSSHKeys signatures verify against it).
func (s *Server) loadImages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxImageBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, wire.ReasonBodyTooLarge, "request body too large", fmt.Sprintf("an image archive must be at most %d bytes", MaxImageBytes))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	identity, ok := s.Authenticate(r, body)
	if !ok {
		writeError(w, http.StatusUnauthorized, wire.ReasonUnauthorized, "unauthorized", "send valid credentials")
		return
	}
	header := r.Header.Get(wire.ContentDigestHeader)
	sum, err := wire.ParseContentDigest(header)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", err.Error())
		return
	}
	l := s.own(w, r, identity)
	if l == nil {
		return
	}
	switch {
	case wire.PhaseEnded(l.Phase):
		writeError(w, http.StatusGone, wire.ReasonLeaseEnded, "lease has ended", "lease "+l.ID+" is "+l.Phase)
		return
	case l.Phase != wire.PhaseBound:
		writeError(w, http.StatusConflict, wire.ReasonLeaseNotBound, "lease not bound", "lease "+l.ID+" is "+l.Phase+"; load images once it is Bound")
		return
	case s.MemberNodes == 0:
		writeError(w, http.StatusConflict, wire.ReasonImagesUnsupported, "member has no nodes", "cluster "+l.ClusterName+" of lease "+l.ID+" has no nodes to load images into")
		return
	case sha256.Sum256(body) != sum:
		writeError(w, http.StatusBadRequest, wire.ReasonDigestMismatch, "digest mismatch", "the body is not what its Content-Digest header says")
		return
	}
	images, err := archiveImages(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.ReasonNotAnImageArchive, "not an image archive", err.Error())
		return
	}
	s.loads = append(s.loads, Load{Lease: l.ID, ContentDigest: header, Body: body})
	writeJSON(w, http.StatusOK, wire.LoadedImages{ID: l.ID, ClusterName: l.ClusterName, Images: images, Nodes: s.MemberNodes, Bytes: int64(len(body))})
}

// archiveImages names the images of a docker-archive (manifest.json's
// RepoTags) or an OCI archive (index.json's image name annotations), plain
// or gzip-compressed.
func archiveImages(body []byte) ([]string, error) {
	var in io.Reader = bytes.NewReader(body)
	if bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		gz, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("the body is not gzip: %w", err)
		}
		in = gz
	}
	var images []string
	tr := tar.NewReader(in)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the body is not a tar archive: %w", err)
		}
		switch path.Clean(h.Name) {
		case "manifest.json":
			var m []struct{ RepoTags []string }
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				return nil, fmt.Errorf("manifest.json: %w", err)
			}
			for _, e := range m {
				images = append(images, e.RepoTags...)
			}
		case "index.json":
			var idx struct {
				Manifests []struct{ Annotations map[string]string }
			}
			if err := json.NewDecoder(tr).Decode(&idx); err != nil {
				return nil, fmt.Errorf("index.json: %w", err)
			}
			for _, m := range idx.Manifests {
				if name := m.Annotations["io.containerd.image.name"]; name != "" {
					images = append(images, name)
				} else if name := m.Annotations["org.opencontainers.image.ref.name"]; name != "" {
					images = append(images, name)
				}
			}
		}
	}
	if len(images) == 0 {
		return nil, errors.New("the archive names no image: no manifest.json with RepoTags (docker-archive) or index.json with image names (OCI)")
	}
	return images, nil
}

func (s *Server) extendLease(w http.ResponseWriter, r *http.Request, identity string, body []byte) {
	l := s.own(w, r, identity)
	if l == nil {
		return
	}
	var req wire.ExtendLeaseRequest
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", err.Error())
		return
	}
	d, err := time.ParseDuration(req.ExtendTTL)
	if err != nil || d <= 0 {
		writeError(w, http.StatusBadRequest, wire.ReasonBadRequest, "bad request", fmt.Sprintf("extend_ttl %q is not a positive duration such as 30m", req.ExtendTTL))
		return
	}
	if l.Phase != wire.PhaseBound {
		writeError(w, http.StatusConflict, wire.ReasonExtensionRefused, "lease not bound", fmt.Sprintf("lease %s is %s; only Bound leases can be extended", l.ID, l.Phase))
		return
	}
	if l.Extensions >= l.MaxExtensions {
		writeError(w, http.StatusConflict, wire.ReasonExtensionLimitReached, "extension limit reached",
			fmt.Sprintf("lease %s has used %d of %d extensions; lease a new cluster instead", l.ID, l.Extensions, l.MaxExtensions))
		return
	}
	l.Extensions++
	l.ExpiresAt = wire.WireTime(l.ExpiresAt.Add(d))
	writeJSON(w, http.StatusOK, wire.ExtendLeaseResponse{ExpiresAt: l.ExpiresAt, Extensions: l.Extensions, MaxExtensions: l.MaxExtensions})
}

func (s *Server) listPools(w http.ResponseWriter, _ *http.Request, identity string, _ []byte) {
	writeJSON(w, http.StatusOK, s.allowedPools(identity))
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	if p := s.usablePool(w, identity, r.PathValue("name")); p != nil {
		writeJSON(w, http.StatusOK, s.renderPool(*p))
	}
}

func (s *Server) listPoolLeases(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	p := s.usablePool(w, identity, r.PathValue("name"))
	if p == nil {
		return
	}
	out := []wire.Lease{}
	for _, id := range s.order {
		l := s.leases[id]
		if l.Pool != p.Name || wire.PhaseEnded(l.Phase) {
			continue
		}
		c := withoutKubeconfig(s.render(l))
		if l.owner != identity {
			c.Requester, c.Alias = "", ""
		}
		out = append(out, c)
	}
	writeJSON(w, http.StatusOK, out)
}

func withoutKubeconfig(l wire.Lease) wire.Lease {
	l.Kubeconfig = ""
	return l
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, reason, msg, detail string) {
	writeJSON(w, code, wire.ErrorBody{Message: msg, Detail: strings.TrimSpace(detail), Reason: reason})
}
