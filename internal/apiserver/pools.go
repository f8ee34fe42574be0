package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// listPools: GET /v1/pools, only the pools the caller may lease from.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	pools, err := s.allowedPools(r.Context(), req.principal)
	if err != nil {
		s.internalError(w, "listing pools", err)
		return
	}
	writeJSON(w, http.StatusOK, pools)
}

func (s *Server) allowedPools(ctx context.Context, p *auth.Principal) ([]wire.Pool, error) {
	var ps kobev1.ClusterPoolList
	if err := s.opts.Reader.List(ctx, &ps, client.InNamespace(s.opts.Namespace)); err != nil {
		return nil, err
	}
	out := []wire.Pool{}
	for i := range ps.Items {
		if p.AllowsPool(ps.Items[i].Name) {
			out = append(out, toWirePool(&ps.Items[i]))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// getPool: GET /v1/pools/{name}.
func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	pool, ok := s.allowedPool(w, r, req.principal)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, toWirePool(pool))
}

func (s *Server) allowedPool(w http.ResponseWriter, r *http.Request, p *auth.Principal) (*kobev1.ClusterPool, bool) {
	name := r.PathValue("name")
	if err := validName("pool", name); err != nil {
		writeError(w, http.StatusBadRequest, "bad request", err.Error())
		return nil, false
	}
	pool := &kobev1.ClusterPool{}
	if err := s.opts.Reader.Get(r.Context(), types.NamespacedName{Namespace: s.opts.Namespace, Name: name}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			writeError(w, http.StatusNotFound, "pool not found", fmt.Sprintf("there is no pool %q; GET /v1/pools lists the pools you may use", name))
			return nil, false
		}
		s.internalError(w, "reading pool", err)
		return nil, false
	}
	if !p.AllowsPool(name) {
		writeError(w, http.StatusForbidden, "pool not allowed", fmt.Sprintf("identity %q may not use pool %q under policy %s", p.Identity, name, p.Policy))
		return nil, false
	}
	return pool, true
}

// listPoolLeases: GET /v1/pools/{name}/leases. The requester is shown only
// on the caller's own leases.
func (s *Server) listPoolLeases(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	pool, ok := s.allowedPool(w, r, req.principal)
	if !ok {
		return
	}
	var ls kobev1.ClusterLeaseList
	if err := s.opts.Reader.List(r.Context(), &ls, client.InNamespace(s.opts.Namespace), client.MatchingFields{index.LeasePool: pool.Name}); err != nil {
		s.internalError(w, "listing leases", err)
		return
	}
	out := []wire.Lease{}
	for i := range ls.Items {
		l := &ls.Items[i]
		if l.DeletionTimestamp != nil || lease.IsEnded(l.Status.Phase) {
			continue
		}
		out = append(out, toWireLease(l, pool, l.Spec.Requester.Identity == req.principal.Identity))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	writeJSON(w, http.StatusOK, out)
}

// status: GET /v1/status works without credentials; pools are listed only
// for an authenticated caller.
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	out := wire.Status{Version: s.opts.Version, Auth: wire.StatusAuth{Methods: s.opts.Auth.Methods()}}
	if out.Auth.Methods == nil {
		out.Auth.Methods = []string{}
	}
	if r.Header.Get("Authorization") != "" {
		p, err := s.opts.Auth.Authenticate(r.Context(), r, body)
		if err != nil && !errors.Is(err, auth.ErrNoCredentials) {
			writeAuthError(w, err)
			return
		}
		if p != nil {
			pools, err := s.allowedPools(r.Context(), p)
			if err != nil {
				s.internalError(w, "listing pools", err)
				return
			}
			out.Pools = pools
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// whoami: GET /v1/whoami tells the caller who the server thinks it is and
// what its policy grants.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	req := s.authenticate(w, r)
	if req == nil {
		return
	}
	p := req.principal
	out := wire.WhoAmI{Identity: p.Identity, Policy: p.Policy, Method: p.Method, Pools: p.Rule.Pools, MaxExtensions: int(p.MaxExtensions())}
	if p.Rule.MaxTTL != nil {
		out.MaxTTL = wire.FormatTTL(p.Rule.MaxTTL.Duration)
	}
	if n, ok := p.MaxConcurrentLeases(); ok {
		out.MaxConcurrentLeases = int(n)
	}
	writeJSON(w, http.StatusOK, out)
}

// getSecret reads a Secret from the cache, falling back to the API server
// when the cache has not seen it yet.
func (s *Server) getSecret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	err := s.opts.Reader.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		err = s.opts.APIReader.Get(ctx, key, sec)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", key, err)
	}
	return sec, nil
}
