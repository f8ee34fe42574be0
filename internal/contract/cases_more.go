package contract

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func extendCases() []Case {
	const route = "PATCH /v1/leases/{id}"
	patch := func(creds func(*suite) apiclient.Credentials, path func(*suite) string, body any) func(*suite) (response, error) {
		return req(creds, http.MethodPatch, path, func(*suite) any { return body })
	}
	ext := wire.ExtendLeaseRequest{ExtendTTL: "5m"}
	return []Case{
		{Route: route, Condition: "own Bound lease", Status: http.StatusOK, Shape: ShapeExtend,
			send: patch(allowed, boundPath, ext),
			check: func(s *suite, r response) error {
				var got wire.ExtendLeaseResponse
				if err := jsonInto(r, &got); err != nil {
					return err
				}
				if got.Extensions != 1 || got.ExpiresAt == nil || !got.ExpiresAt.After(*s.bound.ExpiresAt) {
					return fmt.Errorf("want extensions 1 and an expiry after %s: %s", s.bound.ExpiresAt, r)
				}
				return nil
			}},
		{Route: route, Condition: "by alias", Status: http.StatusOK, Shape: ShapeExtend,
			send: func(s *suite) (response, error) {
				// A fresh lease, so that the limit case below starts from zero.
				if _, err := s.freshBound("contract-extend"); err != nil {
					return response{}, err
				}
				return s.do(s.tg.Allowed, http.MethodPatch, "/v1/leases/contract-extend", ext)
			},
			check: func(_ *suite, r response) error {
				var got wire.ExtendLeaseResponse
				if err := jsonInto(r, &got); err != nil {
					return err
				}
				if got.Extensions != 1 {
					return fmt.Errorf("want extensions 1: %s", r)
				}
				return nil
			}},
		{Route: route, Condition: "extension limit reached", Status: http.StatusConflict, Reason: wire.ReasonExtensionLimitReached,
			send: func(s *suite) (response, error) {
				// contract-extend has 1 extension; use up the rest.
				for i := 1; i < s.tg.MaxExtensions; i++ {
					r, err := s.do(s.tg.Allowed, http.MethodPatch, "/v1/leases/contract-extend", ext)
					if err != nil {
						return response{}, err
					}
					if r.code != http.StatusOK {
						return response{}, fmt.Errorf("extension %d of %d: %s", i+1, s.tg.MaxExtensions, r)
					}
				}
				return s.do(s.tg.Allowed, http.MethodPatch, "/v1/leases/contract-extend", ext)
			}},
		{Route: route, Condition: "Pending lease", Status: http.StatusConflict, Reason: wire.ReasonExtensionRefused,
			send: func(s *suite) (response, error) {
				p, err := s.firstPending()
				if err != nil {
					return response{}, err
				}
				return s.do(s.tg.Allowed, http.MethodPatch, "/v1/leases/"+p.ID, ext)
			}},
		{Route: route, Condition: "extend_ttl is not a duration", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: patch(allowed, boundPath, wire.ExtendLeaseRequest{ExtendTTL: "soon"})},
		{Route: route, Condition: "unknown field", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send:  patch(allowed, boundPath, map[string]string{"extend_ttl": "5m", "colour": "blue"}),
			check: detailContains("colour")},
		{Route: route, Condition: "malformed id", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: patch(allowed, fixed("/v1/leases/"+malformedRef), ext)},
		{Route: route, Condition: "another identity's lease", Status: http.StatusNotFound, Reason: wire.ReasonLeaseNotFound,
			send: patch(other, boundPath, ext)},
		{Route: route, Condition: "no such lease", Status: http.StatusNotFound, Reason: wire.ReasonLeaseNotFound,
			send: patch(allowed, fixed("/v1/leases/"+missingLease), ext)},
		{Route: route, Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: patch(nil, boundPath, ext)},
	}
}

func releaseCases() []Case {
	const route = "DELETE /v1/leases/{id}"
	del := func(creds func(*suite) apiclient.Credentials, path func(*suite) string) func(*suite) (response, error) {
		return req(creds, http.MethodDelete, path, nil)
	}
	var released string
	return []Case{
		{Route: route, Condition: "own Bound lease", Status: http.StatusNoContent, Shape: ShapeNone,
			send: func(s *suite) (response, error) {
				l, err := s.freshBound("")
				if err != nil {
					return response{}, err
				}
				released = l.ID
				return s.do(s.tg.Allowed, http.MethodDelete, "/v1/leases/"+l.ID, nil)
			},
			check: func(s *suite, _ response) error { return s.requireNotListed(released) }},
		{Route: route, Condition: "own lease, already released", Status: http.StatusNoContent, Shape: ShapeNone,
			send: func(s *suite) (response, error) {
				return s.do(s.tg.Allowed, http.MethodDelete, "/v1/leases/"+released, nil)
			}},
		{Route: route, Condition: "by alias", Status: http.StatusNoContent, Shape: ShapeNone,
			send: del(allowed, fixed("/v1/leases/contract-extend")),
			check: func(s *suite, _ response) error {
				r, err := s.do(s.tg.Allowed, http.MethodGet, "/v1/leases", nil)
				if err != nil {
					return err
				}
				ls, err := decodeLeases(r)
				if err != nil {
					return err
				}
				for _, l := range ls {
					if l.Alias == "contract-extend" {
						return fmt.Errorf("lease %s (alias contract-extend) still active after DELETE", l.ID)
					}
				}
				return nil
			}},
		{Route: route, Condition: "own Pending lease: the queue moves up", Status: http.StatusNoContent, Shape: ShapeNone,
			send: func(s *suite) (response, error) {
				p, err := s.firstPending()
				if err != nil {
					return response{}, err
				}
				id := p.ID
				s.pending = s.pending[1:]
				return s.do(s.tg.Allowed, http.MethodDelete, "/v1/leases/"+id, nil)
			},
			check: func(s *suite, _ response) error {
				return s.eventually(func() error {
					r, l, err := s.get(s.tg.Allowed, s.pending[0].ID)
					if err != nil || l == nil {
						return fmt.Errorf("reading %s: %w %s", s.pending[0].ID, err, r)
					}
					if l.QueuePosition != 1 {
						return fmt.Errorf("after the lease ahead left, %s has queue_position %d, want 1", l.ID, l.QueuePosition)
					}
					return nil
				})
			}},
		{Route: route, Condition: "another identity's lease: untouched", Status: http.StatusNoContent, Shape: ShapeNone,
			send: del(other, boundPath),
			check: func(s *suite, _ response) error {
				r, l, err := s.get(s.tg.Allowed, s.bound.ID)
				if err != nil || l == nil || l.Phase != wire.PhaseBound {
					return fmt.Errorf("the owner's lease changed: %w %s", err, r)
				}
				return nil
			}},
		{Route: route, Condition: "no such lease", Status: http.StatusNoContent, Shape: ShapeNone,
			send: del(allowed, fixed("/v1/leases/"+missingLease))},
		{Route: route, Condition: "no such alias", Status: http.StatusNoContent, Shape: ShapeNone,
			send: del(allowed, fixed("/v1/leases/no-such-alias"))},
		{Route: route, Condition: "malformed id", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: del(allowed, fixed("/v1/leases/"+malformedRef))},
		{Route: route, Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: del(nil, boundPath)},
	}
}

func poolCases() []Case {
	get := func(creds func(*suite) apiclient.Credentials, path func(*suite) string) func(*suite) (response, error) {
		return req(creds, http.MethodGet, path, nil)
	}
	readyPool := func(s *suite) string { return "/v1/pools/" + s.tg.ReadyPool }
	missingPool := func(s *suite) string { return "/v1/pools/" + s.tg.MissingPool }
	return []Case{
		{Route: "GET /v1/pools", Condition: "pools the caller may use", Status: http.StatusOK, Shape: ShapePools,
			send:  get(allowed, fixed("/v1/pools")),
			check: poolNames(func(s *suite) []string { return []string{s.tg.ReadyPool, s.tg.EmptyPool} }, nil)},
		{Route: "GET /v1/pools", Condition: "a caller allowed none of them", Status: http.StatusOK, Shape: ShapePools,
			send:  get(denied, fixed("/v1/pools")),
			check: poolNames(nil, func(s *suite) []string { return []string{s.tg.ReadyPool, s.tg.EmptyPool} })},
		{Route: "GET /v1/pools", Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: get(nil, fixed("/v1/pools"))},
		{Route: "GET /v1/pools/{name}", Condition: "allowed pool", Status: http.StatusOK, Shape: ShapePool,
			send: get(allowed, readyPool),
			check: func(s *suite, r response) error {
				var p wire.Pool
				if err := jsonInto(r, &p); err != nil {
					return err
				}
				if p.Name != s.tg.ReadyPool {
					return fmt.Errorf("want pool %s: %s", s.tg.ReadyPool, r)
				}
				return nil
			}},
		{Route: "GET /v1/pools/{name}", Condition: "pool exists, not allowed", Status: http.StatusForbidden, Reason: wire.ReasonPoolNotAllowed,
			send: get(denied, readyPool)},
		{Route: "GET /v1/pools/{name}", Condition: "pool missing, not allowed", Status: http.StatusForbidden, Reason: wire.ReasonPoolNotAllowed,
			send: get(denied, missingPool)},
		{Route: "GET /v1/pools/{name}", Condition: "pool missing, allowed", Status: http.StatusNotFound, Reason: wire.ReasonPoolNotFound,
			send: get(allowed, missingPool)},
		{Route: "GET /v1/pools/{name}", Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: get(nil, readyPool)},
		{Route: "GET /v1/pools/{name}/leases", Condition: "requester shown on the caller's own leases only", Status: http.StatusOK, Shape: ShapeLeases, poll: true,
			send: get(allowed, func(s *suite) string { return readyPool(s) + "/leases" }),
			check: func(s *suite, r response) error {
				ls, err := decodeLeases(r)
				if err != nil {
					return err
				}
				own, theirs := findLease(ls, s.bound.ID), findLease(ls, s.otherBound.ID)
				if own == nil || theirs == nil {
					return fmt.Errorf("want leases %s and %s listed: %s", s.bound.ID, s.otherBound.ID, r)
				}
				if own.Requester == "" || theirs.Requester != "" || theirs.Kubeconfig != "" || own.Kubeconfig != "" {
					return fmt.Errorf("requester must show on %s only, and no kubeconfig at all: %s", s.bound.ID, r)
				}
				return nil
			}},
		{Route: "GET /v1/pools/{name}/leases", Condition: "live queue positions", Status: http.StatusOK, Shape: ShapeLeases, poll: true,
			send: get(allowed, func(s *suite) string { return "/v1/pools/" + s.tg.EmptyPool + "/leases" }),
			check: func(s *suite, r response) error {
				ls, err := decodeLeases(r)
				if err != nil {
					return err
				}
				return s.requirePositions(ls)
			}},
		{Route: "GET /v1/pools/{name}/leases", Condition: "pool exists, not allowed", Status: http.StatusForbidden, Reason: wire.ReasonPoolNotAllowed,
			send: get(denied, func(s *suite) string { return readyPool(s) + "/leases" })},
		{Route: "GET /v1/pools/{name}/leases", Condition: "pool missing, not allowed", Status: http.StatusForbidden, Reason: wire.ReasonPoolNotAllowed,
			send: get(denied, func(s *suite) string { return missingPool(s) + "/leases" })},
		{Route: "GET /v1/pools/{name}/leases", Condition: "pool missing, allowed", Status: http.StatusNotFound, Reason: wire.ReasonPoolNotFound,
			send: get(allowed, func(s *suite) string { return missingPool(s) + "/leases" })},
		{Route: "GET /v1/pools/{name}/leases", Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: get(nil, func(s *suite) string { return readyPool(s) + "/leases" })},
	}
}

// poolNames checks a pool list: it holds every name of want and none of
// unwanted.
func poolNames(want, unwanted func(*suite) []string) func(s *suite, r response) error {
	return func(s *suite, r response) error {
		var ps []wire.Pool
		if err := jsonInto(r, &ps); err != nil {
			return err
		}
		names := make([]string, len(ps))
		for i := range ps {
			names[i] = ps[i].Name
		}
		if want != nil {
			for _, n := range want(s) {
				if !slices.Contains(names, n) {
					return fmt.Errorf("pool %s missing from %v", n, names)
				}
			}
		}
		if unwanted != nil {
			for _, n := range unwanted(s) {
				if slices.Contains(names, n) {
					return fmt.Errorf("pool %s listed for a caller not allowed to use it: %v", n, names)
				}
			}
		}
		return nil
	}
}

func statusCases() []Case {
	return []Case{
		{Route: "GET /v1/status", Condition: "no credentials: no pools", Status: http.StatusOK, Shape: ShapeStatus,
			send: req(nil, http.MethodGet, fixed("/v1/status"), nil),
			check: func(_ *suite, r response) error {
				m, err := object(r.body)
				if err != nil {
					return err
				}
				if _, ok := m["pools"]; ok {
					return fmt.Errorf("an anonymous caller sees pools: %s", r)
				}
				return nil
			}},
		{Route: "GET /v1/status", Condition: "authenticated: the caller's pools", Status: http.StatusOK, Shape: ShapeStatus,
			send: req(allowed, http.MethodGet, fixed("/v1/status"), nil),
			check: func(s *suite, r response) error {
				var st wire.Status
				if err := jsonInto(r, &st); err != nil {
					return err
				}
				if !slices.ContainsFunc(st.Pools, func(p wire.Pool) bool { return p.Name == s.tg.ReadyPool }) {
					return fmt.Errorf("pool %s missing: %s", s.tg.ReadyPool, r)
				}
				return nil
			}},
	}
}

func routeCases() []Case {
	return []Case{
		{Route: "PUT /v1/leases", Condition: "method not allowed", Status: http.StatusMethodNotAllowed, Reason: wire.ReasonMethodNotAllowed,
			send: req(allowed, http.MethodPut, fixed("/v1/leases"), nil)},
		{Route: "POST /v1/status", Condition: "method not allowed", Status: http.StatusMethodNotAllowed, Reason: wire.ReasonMethodNotAllowed,
			send: req(allowed, http.MethodPost, fixed("/v1/status"), nil)},
		{Route: "DELETE /v1/pools/{name}", Condition: "method not allowed", Status: http.StatusMethodNotAllowed, Reason: wire.ReasonMethodNotAllowed,
			send: req(allowed, http.MethodDelete, func(s *suite) string { return "/v1/pools/" + s.tg.ReadyPool }, nil)},
		{Route: "GET /v1/nothing", Condition: "unknown route", Status: http.StatusNotFound, Reason: wire.ReasonNotFound,
			send: req(allowed, http.MethodGet, fixed("/v1/nothing"), nil)},
	}
}
