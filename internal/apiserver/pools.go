package apiserver

import (
	"net/http"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// listPools: GET /v1/pools, only the pools the caller may use.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	ps, err := s.leases.Pools(r.Context(), principal(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWirePools(ps))
}

// getPool: GET /v1/pools/{name}. A pool the caller may not use is a 403
// whether or not it exists.
func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	p, err := s.leases.Pool(r.Context(), principal(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWirePool(p))
}

// listPoolLeases: GET /v1/pools/{name}/leases. The requester is shown only
// on the caller's own leases.
func (s *Server) listPoolLeases(w http.ResponseWriter, r *http.Request) {
	ls, err := s.leases.ListPool(r.Context(), principal(r), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWireLeases(ls))
}

// status: GET /v1/status works without credentials; pools are listed only
// for an authenticated caller.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	out := wire.Status{Version: s.opts.Version, Auth: wire.StatusAuth{Methods: s.opts.Auth.Methods(), Audience: s.opts.Auth.Audience()}}
	if out.Auth.Methods == nil {
		out.Auth.Methods = []string{}
	}
	if p := principal(r); p != nil {
		ps, err := s.leases.Pools(r.Context(), p)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Pools = toWirePools(ps)
	}
	writeJSON(w, http.StatusOK, out)
}

// whoami: GET /v1/whoami tells the caller who the server thinks it is and
// what its policy grants.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	// max_ttl is the one that applies: the rule's, else the default maximum.
	out := wire.WhoAmI{Identity: p.Identity, Policy: p.Policy, Method: p.Method, Pools: p.Rule.Pools,
		MaxTTL: wire.FormatTTL(p.MaxTTL()), MaxExtensions: int(p.MaxExtensions())}
	if n, ok := p.MaxConcurrentLeases(); ok {
		out.MaxConcurrentLeases = int(n)
	}
	writeJSON(w, http.StatusOK, out)
}
