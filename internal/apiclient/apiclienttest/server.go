// Package apiclienttest is an in-memory fake of kobe's HTTP API (v1) for unit
// tests of the client and the CLI. It follows the wire contract (routes, JSON
// fields, status codes) but none of the operator's behaviour beyond that; the
// real API is covered by the end-to-end tests.
package apiclienttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Token is the bearer token the fake accepts by default.
const Token = "test-token"

// Server is a running fake. Set its exported fields with New's options;
// once it runs, change them only under Lock/Unlock.
type Server struct {
	*httptest.Server

	// Authenticate decides who the caller is; ok=false answers 401. The
	// default accepts "Authorization: Bearer <Token>" as identity "tester".
	Authenticate func(r *http.Request, body []byte) (identity string, ok bool)
	// PendingPolls is how many GETs a new lease answers Pending before it
	// binds; 0 binds at once (201).
	PendingPolls int
	// EndWhilePending, when set, ends a Pending lease with this phase (and
	// reason "queue timeout") instead of binding it.
	EndWhilePending string
	// MaxExtensions caps extensions per lease (default 2).
	MaxExtensions int
	// MaxConcurrentLeases answers 429 beyond it; 0 means no limit.
	MaxConcurrentLeases int

	mu       sync.Mutex
	now      func() time.Time
	pools    []wire.Pool
	leases   map[string]*lease
	order    []string
	nextID   int
	requests []string
	released []string
}

type lease struct {
	wire.Lease
	owner   string
	ttl     time.Duration
	waiting int
}

// Option sets up a Server before it starts serving.
type Option func(*Server)

// WithPendingPolls makes new leases answer Pending for n GETs.
func WithPendingPolls(n int) Option { return func(s *Server) { s.PendingPolls = n } }

// WithEndWhilePending ends Pending leases with phase instead of binding them.
func WithEndWhilePending(phase string) Option { return func(s *Server) { s.EndWhilePending = phase } }

// WithMaxExtensions caps extensions per lease.
func WithMaxExtensions(n int) Option { return func(s *Server) { s.MaxExtensions = n } }

// WithMaxConcurrentLeases caps the active leases of an identity.
func WithMaxConcurrentLeases(n int) Option { return func(s *Server) { s.MaxConcurrentLeases = n } }

// WithPool adds a pool.
func WithPool(p wire.Pool) Option { return func(s *Server) { s.pools = append(s.pools, p) } }

// New starts a fake with one fixed pool "ci-small" (three Ready members,
// default TTL 1h) plus what opts set up, and stops it when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		MaxExtensions: 2,
		now:           func() time.Time { return time.Date(2026, 4, 9, 14, 30, 0, 0, time.UTC) },
		leases:        map[string]*lease{},
		pools: []wire.Pool{{
			Name: "ci-small", Phase: "Healthy", Ready: 3,
			Policy: wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: 3},
		}},
	}
	s.Authenticate = func(r *http.Request, _ []byte) (string, bool) {
		return "tester", r.Header.Get("Authorization") == "Bearer "+Token
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

// Released returns the IDs of the leases released with DELETE, in order.
func (s *Server) Released() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.released)
}

// Lease returns a copy of the lease with id as the server holds it.
func (s *Server) Lease(id string) (wire.Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return wire.Lease{}, false
	}
	return l.Lease, true
}

// Kubeconfig is the kubeconfig the fake hands out for a lease.
func Kubeconfig(id string) string {
	return "apiVersion: v1\nkind: Config\ncurrent-context: " + id + "\n"
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
	mux.HandleFunc("GET /v1/pools", s.authed(s.listPools))
	mux.HandleFunc("GET /v1/pools/{name}", s.authed(s.getPool))
	mux.HandleFunc("GET /v1/pools/{name}/leases", s.authed(s.listPoolLeases))
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
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "body too large", "send at most 1 MiB")
			return
		}
		identity, ok := s.Authenticate(r, body)
		if !ok {
			writeError(w, http.StatusUnauthorized, "unauthorized", "send valid credentials")
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		h(w, r, identity, body)
	}
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	st := wire.Status{Version: "v0.0.0-fake", Auth: wire.StatusAuth{Methods: []string{"token"}}}
	if _, ok := s.Authenticate(r, body); ok {
		s.mu.Lock()
		st.Pools = slices.Clone(s.pools)
		s.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, identity string, _ []byte) {
	names := []string{}
	for _, p := range s.pools {
		names = append(names, p.Name)
	}
	writeJSON(w, http.StatusOK, wire.WhoAmI{
		Identity: identity, Policy: "fake-policy", Method: "token", Pools: names,
		MaxTTL: "2h", MaxConcurrentLeases: s.MaxConcurrentLeases, MaxExtensions: s.MaxExtensions,
	})
}

func (s *Server) pool(name string) *wire.Pool {
	for i := range s.pools {
		if s.pools[i].Name == name {
			return &s.pools[i]
		}
	}
	return nil
}

func (s *Server) createLease(w http.ResponseWriter, _ *http.Request, identity string, body []byte) {
	var req wire.CreateLeaseRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad body", err.Error())
		return
	}
	p := s.pool(req.PoolName())
	if p == nil {
		writeError(w, http.StatusNotFound, "pool not found", fmt.Sprintf("no pool %q: list pools with GET /v1/pools", req.PoolName()))
		return
	}
	ttlText := req.TTL
	if ttlText == "" {
		ttlText = p.Policy.TTL
	}
	ttl, err := time.ParseDuration(ttlText)
	if err != nil || ttl <= 0 {
		writeError(w, http.StatusBadRequest, "invalid ttl", fmt.Sprintf("ttl %q is not a positive duration such as 30m", req.TTL))
		return
	}
	if s.MaxConcurrentLeases > 0 && s.activeLeases(identity) >= s.MaxConcurrentLeases {
		w.Header().Set("Retry-After", "30")
		writeError(w, http.StatusTooManyRequests, "concurrent lease limit reached", "release a lease first")
		return
	}
	s.nextID++
	now := s.now()
	l := &lease{
		Lease: wire.Lease{
			ID: fmt.Sprintf("lease-%012x", s.nextID), Phase: wire.PhasePending,
			Pool: p.Name, Profile: p.Name, EffectiveTTL: wire.FormatTTL(ttl),
			MaxExtensions: s.MaxExtensions, Requester: identity, CreatedAt: wire.WireTime(now),
		},
		owner: identity, ttl: ttl, waiting: s.PendingPolls,
	}
	s.leases[l.ID] = l
	s.order = append(s.order, l.ID)
	if l.waiting == 0 {
		s.bind(l)
		writeJSON(w, http.StatusCreated, l.Lease)
		return
	}
	l.QueuePosition = l.waiting
	p.QueueDepth++
	writeJSON(w, http.StatusAccepted, l.Lease)
}

func (s *Server) bind(l *lease) {
	now := s.now()
	l.Phase = wire.PhaseBound
	l.QueuePosition = 0
	l.ClusterName = "pool-" + l.Pool + "-0"
	l.BoundAt = wire.WireTime(now)
	l.ExpiresAt = wire.WireTime(now.Add(l.ttl))
	l.Kubeconfig = Kubeconfig(l.ID)
	if p := s.pool(l.Pool); p != nil {
		p.Leased++
		p.Ready--
	}
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

// own returns the caller's lease, or answers 404 (another identity's lease
// is as unknown as a missing one).
func (s *Server) own(w http.ResponseWriter, r *http.Request, identity string) *lease {
	l, ok := s.leases[r.PathValue("id")]
	if !ok || l.owner != identity {
		writeError(w, http.StatusNotFound, "lease not found", fmt.Sprintf("no lease %q for %s", r.PathValue("id"), identity))
		return nil
	}
	return l
}

func (s *Server) listLeases(w http.ResponseWriter, _ *http.Request, identity string, _ []byte) {
	out := []wire.Lease{}
	for _, id := range s.order {
		l := s.leases[id]
		if l.owner == identity && !wire.PhaseEnded(l.Phase) {
			out = append(out, withoutKubeconfig(l.Lease))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getLease(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	l := s.own(w, r, identity)
	if l == nil {
		return
	}
	if l.Phase == wire.PhasePending {
		l.waiting--
		l.QueuePosition = max(l.waiting, 1)
		if l.waiting <= 0 {
			if p := s.pool(l.Pool); p != nil {
				p.QueueDepth--
			}
			if s.EndWhilePending != "" {
				l.Phase, l.Reason, l.QueuePosition = s.EndWhilePending, "queue timeout", 0
			} else {
				s.bind(l)
			}
		}
	}
	writeJSON(w, http.StatusOK, l.Lease)
}

func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	l := s.own(w, r, identity)
	if l == nil {
		return
	}
	s.released = append(s.released, l.ID)
	if !wire.PhaseEnded(l.Phase) {
		l.Phase, l.Reason, l.Kubeconfig = wire.PhaseReleased, "released by its holder", ""
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) extendLease(w http.ResponseWriter, r *http.Request, identity string, body []byte) {
	l := s.own(w, r, identity)
	if l == nil {
		return
	}
	var req wire.ExtendLeaseRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad body", err.Error())
		return
	}
	d, err := time.ParseDuration(req.ExtendTTL)
	if err != nil || d <= 0 {
		writeError(w, http.StatusBadRequest, "invalid ttl", fmt.Sprintf("extend_ttl %q is not a positive duration such as 30m", req.ExtendTTL))
		return
	}
	if l.Phase != wire.PhaseBound {
		writeError(w, http.StatusConflict, "lease not bound", fmt.Sprintf("lease %s is %s; only Bound leases can be extended", l.ID, l.Phase))
		return
	}
	if l.Extensions >= l.MaxExtensions {
		writeError(w, http.StatusConflict, "extension limit reached",
			fmt.Sprintf("lease %s has used %d of %d extensions; lease a new cluster instead", l.ID, l.Extensions, l.MaxExtensions))
		return
	}
	l.Extensions++
	l.ExpiresAt = wire.WireTime(l.ExpiresAt.Add(d))
	writeJSON(w, http.StatusOK, wire.ExtendLeaseResponse{ExpiresAt: l.ExpiresAt, Extensions: l.Extensions, MaxExtensions: l.MaxExtensions})
}

func (s *Server) listPools(w http.ResponseWriter, _ *http.Request, _ string, _ []byte) {
	writeJSON(w, http.StatusOK, s.pools)
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request, _ string, _ []byte) {
	p := s.pool(r.PathValue("name"))
	if p == nil {
		writeError(w, http.StatusNotFound, "pool not found", fmt.Sprintf("no pool %q", r.PathValue("name")))
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) listPoolLeases(w http.ResponseWriter, r *http.Request, identity string, _ []byte) {
	if s.pool(r.PathValue("name")) == nil {
		writeError(w, http.StatusNotFound, "pool not found", fmt.Sprintf("no pool %q", r.PathValue("name")))
		return
	}
	out := []wire.Lease{}
	for _, id := range s.order {
		l := s.leases[id]
		if l.Pool != r.PathValue("name") || wire.PhaseEnded(l.Phase) {
			continue
		}
		c := withoutKubeconfig(l.Lease)
		if l.owner != identity {
			c.Requester = ""
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

func writeError(w http.ResponseWriter, code int, msg, detail string) {
	writeJSON(w, code, wire.ErrorBody{Message: msg, Detail: strings.TrimSpace(detail)})
}
