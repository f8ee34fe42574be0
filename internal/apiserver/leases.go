package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// createLease: POST /v1/leases. 201 with the Bound lease and its
// kubeconfig, or 202 with the lease Pending and its queue position.
func (s *Server) createLease(w http.ResponseWriter, r *http.Request) {
	req, err := decodeCreate(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	l, err := s.leases.Create(r.Context(), principal(r), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	code := http.StatusAccepted
	if l.Bound() {
		code = http.StatusCreated
	}
	answering := time.Now()
	writeJSON(w, code, toWireLease(l))
	metrics.HandoutPhase(metrics.PhaseAnswer, time.Since(answering))
}

// getLease: GET /v1/leases/{id}, by id or alias. Another identity's lease
// is a 404.
func (s *Server) getLease(w http.ResponseWriter, r *http.Request) {
	hold, err := wire.ParseLeaseWait(r.URL.Query().Get(wire.LeaseWaitParam))
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: %w", leaseservice.ErrInvalid, err))
		return
	}
	if hold > 0 && !s.waitWhilePending(w, r, hold) {
		return
	}
	l, err := s.leases.Get(r.Context(), principal(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWireLease(l))
}

// reacquireTimeout bounds how long a request that waited queues for an
// in-flight slot to answer in; beyond it, 429 as for any other request.
const reacquireTimeout = 5 * time.Second

// waitWhilePending holds GET /v1/leases/{id}?wait= while the caller's lease
// is Pending, for at most hold, without its in-flight slot: waiting callers
// are limited by a count of their own (MaxInFlight), and beyond it the
// answer comes at once, as from a server that does not wait. It reports
// false when it answered (429: no slot to answer in).
func (s *Server) waitWhilePending(w http.ResponseWriter, r *http.Request, hold time.Duration) bool {
	select {
	case s.waiting <- struct{}{}:
		defer func() { <-s.waiting }()
	default:
		return true
	}
	slot, _ := r.Context().Value(inFlightSlotKey{}).(*inFlightSlot)
	if slot != nil {
		slot.release()
	}
	s.leases.WaitWhilePending(r.Context(), principal(r), r.PathValue("id"), hold)
	if slot == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), reacquireTimeout)
	defer cancel()
	if err := slot.reacquire(ctx); err != nil {
		s.tooManyRequests(w)
		return false
	}
	return true
}

// listLeases: GET /v1/leases, the caller's active leases.
func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) {
	f, err := listFilter(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ls, err := s.leases.List(r.Context(), principal(r), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWireLeases(ls))
}

// releaseLease: DELETE /v1/leases/{id}, by id or alias. 204 also when the
// caller holds no such lease, so it is idempotent for the owner and tells
// nobody else whether a lease exists.
func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) {
	if err := s.leases.Release(r.Context(), principal(r), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// extendLease: PATCH /v1/leases/{id} {"extend_ttl": "30m"}, by id or alias.
func (s *Server) extendLease(w http.ResponseWriter, r *http.Request) {
	by, err := decodeExtend(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	l, err := s.leases.Extend(r.Context(), principal(r), r.PathValue("id"), by)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ExtendLeaseResponse{
		ExpiresAt:     wire.WireTime(l.Object.Status.ExpiresAt.Time),
		Extensions:    int(l.Object.Status.Extensions),
		MaxExtensions: int(lease.MaxExtensions(l.Object)),
		Kubeconfig:    string(l.Kubeconfig),
	})
}

// listFilter reads GET /v1/leases' query: alias and pool, each at most
// once. Any other parameter is refused rather than ignored: a misspelled
// filter must not list (and a script then release) every lease.
func listFilter(q url.Values) (leaseservice.ListFilter, error) {
	var f leaseservice.ListFilter
	for key, vals := range q {
		if len(vals) != 1 {
			return f, fmt.Errorf("%w: query parameter %q given %d times; give it once", errBadRequest, key, len(vals))
		}
		switch key {
		case "alias":
			f.Alias = vals[0]
		case "pool":
			f.Pool = vals[0]
		default:
			return f, fmt.Errorf("%w: unknown query parameter %q; GET /v1/leases takes alias and pool", errBadRequest, key)
		}
	}
	return f, nil
}

// heartbeat: POST /v1/leases/{id}/heartbeat, by id or alias, no body: the
// holder is alive. 200 with the lease (no kubeconfig) and
// heartbeat_ends_at.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	l, err := s.leases.Heartbeat(r.Context(), principal(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWireLease(l))
}
