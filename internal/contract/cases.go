package contract

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	// boundAlias names Allowed's and Other's first Bound leases: an alias
	// is unique per owner, not across owners.
	boundAlias = "contract-bound"
	// missingLease is a well-formed lease id that no lease has.
	missingLease = "lease-00000000dead"
	// malformedRef is neither a lease id nor an alias.
	malformedRef = "Not_A_Lease"
)

// Cases is the contract, one row per route and condition, in the order Run
// sends them.
func Cases() []Case {
	var cases []Case
	for _, group := range [][]Case{createCases(), getLeaseCases(), extendCases(), heartbeatCases(), releaseCases(), poolCases(), statusCases(), loginCases(), routeCases(), limitCases()} {
		cases = append(cases, group...)
	}
	return cases
}

// req is a case that sends one request with no preparation.
func req(creds func(*suite) apiclient.Credentials, method string, path func(*suite) string, body func(*suite) any) func(*suite) (response, error) {
	return func(s *suite) (response, error) {
		var c apiclient.Credentials
		if creds != nil {
			c = creds(s)
		}
		var b any
		if body != nil {
			b = body(s)
		}
		return s.do(c, method, path(s), b)
	}
}

func allowed(s *suite) apiclient.Credentials { return s.tg.Allowed }
func other(s *suite) apiclient.Credentials   { return s.tg.Other }
func denied(s *suite) apiclient.Credentials  { return s.tg.Denied }
func fixed(p string) func(*suite) string     { return func(*suite) string { return p } }

func createBody(mod func(s *suite, b map[string]any)) func(*suite) any {
	return func(s *suite) any {
		b := map[string]any{"pool": s.tg.ReadyPool, "ttl": "10m"}
		if mod != nil {
			mod(s, b)
		}
		return b
	}
}

func createCases() []Case {
	post := func(creds func(*suite) apiclient.Credentials, body func(*suite) any) func(*suite) (response, error) {
		return req(creds, http.MethodPost, fixed("/v1/leases"), body)
	}
	const route = "POST /v1/leases"
	return []Case{
		{Route: route, Condition: "Ready member, with an alias", Status: http.StatusCreated, Shape: ShapeLease,
			send: post(allowed, createBody(func(_ *suite, b map[string]any) { b["alias"] = boundAlias })),
			check: func(s *suite, r response) error {
				l, err := decodeLease(r)
				if err != nil {
					return err
				}
				if l.Phase != wire.PhaseBound || l.Kubeconfig == "" || l.ClusterName == "" || l.ExpiresAt == nil ||
					l.QueuePosition != 0 || l.Alias != boundAlias || l.Pool != s.tg.ReadyPool || l.EffectiveTTL != "10m" {
					return fmt.Errorf("want a Bound lease of %s with kubeconfig, expiry, alias %q, queue_position 0: %s", s.tg.ReadyPool, boundAlias, r)
				}
				s.bound = l
				return s.waitVisible(s.tg.Allowed, l.ID)
			}},
		{Route: route, Condition: "profile as a synonym of pool", Status: http.StatusCreated, Shape: ShapeLease,
			send: post(allowed, func(s *suite) any { return map[string]any{"profile": s.tg.ReadyPool, "ttl": "10m"} }),
			check: func(s *suite, r response) error {
				l, err := decodeLease(r)
				if err != nil {
					return err
				}
				if l.Pool != s.tg.ReadyPool || l.Profile != s.tg.ReadyPool || l.Phase != wire.PhaseBound {
					return fmt.Errorf("want a Bound lease of pool and profile %s: %s", s.tg.ReadyPool, r)
				}
				return nil
			}},
		{Route: route, Condition: "another owner reuses an alias", Status: http.StatusCreated, Shape: ShapeLease,
			send: func(s *suite) (response, error) {
				if _, err := s.boundLease(); err != nil {
					return response{}, err
				}
				return s.do(s.tg.Other, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, TTL: "10m", Alias: boundAlias})
			},
			check: func(s *suite, r response) error {
				l, err := decodeLease(r)
				if err != nil {
					return err
				}
				if l.Alias != boundAlias || l.ID == s.bound.ID {
					return fmt.Errorf("want a new lease with alias %q: %s", boundAlias, r)
				}
				s.otherBound = l
				return s.waitVisible(s.tg.Other, l.ID)
			}},
		{Route: route, Condition: "empty pool: queued first", Status: http.StatusAccepted, Shape: ShapeLease,
			send:  post(allowed, func(s *suite) any { return wire.CreateLeaseRequest{Pool: s.tg.EmptyPool, TTL: "10m"} }),
			check: checkQueued(1)},
		{Route: route, Condition: "empty pool: queued second", Status: http.StatusAccepted, Shape: ShapeLease,
			send: func(s *suite) (response, error) {
				first, err := s.firstPending()
				if err != nil {
					return response{}, err
				}
				if err := s.waitVisible(s.tg.Allowed, first.ID); err != nil {
					return response{}, err
				}
				return s.do(s.tg.Allowed, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: s.tg.EmptyPool, TTL: "10m"})
			},
			check: checkQueued(2)},
		{Route: route, Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: post(nil, createBody(nil))},
		{Route: route, Condition: "invalid credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: post(func(s *suite) apiclient.Credentials { return s.tg.Invalid }, createBody(nil))},
		{Route: route, Condition: "body is not JSON", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: post(allowed, func(*suite) any { return []byte(`{"pool": `) })},
		{Route: route, Condition: "unknown field", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send:  post(allowed, createBody(func(_ *suite, b map[string]any) { b["colour"] = "blue" })),
			check: detailContains("colour")},
		{Route: route, Condition: "ttl is not a duration", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: post(allowed, createBody(func(_ *suite, b map[string]any) { b["ttl"] = "forever" }))},
		{Route: route, Condition: "cleanupMode unknown", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send:  post(allowed, createBody(func(_ *suite, b map[string]any) { b["cleanupMode"] = "Paranoid" })),
			check: detailContains("cleanupMode")},
		{Route: route, Condition: "cleanupMode VerifiedDestroy, the pool's backend cannot prove it", Status: http.StatusUnprocessableEntity,
			Reason: wire.ReasonCleanupModeUnsupported,
			send:   post(allowed, createBody(func(_ *suite, b map[string]any) { b["cleanupMode"] = wire.CleanupVerifiedDestroy }))},
		{Route: route, Condition: "alias is malformed", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: post(allowed, createBody(func(_ *suite, b map[string]any) { b["alias"] = "Not An Alias" }))},
		{Route: route, Condition: "alias has the form of a lease id", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: post(allowed, createBody(func(_ *suite, b map[string]any) { b["alias"] = "lease-0123456789ab" }))},
		{Route: route, Condition: "alias held by an active lease of the caller", Status: http.StatusConflict, Reason: wire.ReasonAliasInUse,
			send: func(s *suite) (response, error) {
				if _, err := s.boundLease(); err != nil {
					return response{}, err
				}
				return s.do(s.tg.Allowed, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, TTL: "10m", Alias: boundAlias})
			}},
		{Route: route, Condition: "pool exists, not allowed", Status: http.StatusForbidden, Reason: wire.ReasonPoolNotAllowed,
			send: post(denied, createBody(nil))},
		{Route: route, Condition: "pool missing, not allowed", Status: http.StatusForbidden, Reason: wire.ReasonPoolNotAllowed,
			send: post(denied, createBody(func(s *suite, b map[string]any) { b["pool"] = s.tg.MissingPool }))},
		{Route: route, Condition: "pool missing, allowed", Status: http.StatusNotFound, Reason: wire.ReasonPoolNotFound,
			send: post(allowed, createBody(func(s *suite, b map[string]any) { b["pool"] = s.tg.MissingPool }))},
		{Route: route, Condition: "body over the limit", Status: http.StatusRequestEntityTooLarge, Reason: wire.ReasonBodyTooLarge,
			send: post(allowed, func(s *suite) any {
				return []byte(`{"pool": "` + strings.Repeat("a", s.tg.MaxBodyBytes) + `"}`)
			})},
		{Route: route, Condition: "concurrent lease limit reached", Status: http.StatusTooManyRequests, Reason: wire.ReasonConcurrentLeaseLimit,
			send: func(s *suite) (response, error) {
				if s.limited == nil {
					l, err := s.create(s.tg.Limited, wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, TTL: "10m"}, http.StatusCreated)
					if err != nil {
						return response{}, err
					}
					s.limited = l
					if err := s.waitVisible(s.tg.Limited, l.ID); err != nil {
						return response{}, err
					}
				}
				return s.do(s.tg.Limited, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, TTL: "10m"})
			}},
		{Route: route, Condition: "pool being deleted", Status: http.StatusServiceUnavailable, Reason: wire.ReasonPoolBeingDeleted,
			send:  post(allowed, createBody(func(s *suite, b map[string]any) { b["pool"] = s.tg.DeletingPool })),
			check: noLeaseIn(func(s *suite) string { return s.tg.DeletingPool })},
		{Route: route, Condition: "pool backend unavailable", Status: http.StatusServiceUnavailable, Reason: wire.ReasonBackendUnavailable,
			send:  post(allowed, createBody(func(s *suite, b map[string]any) { b["pool"] = s.tg.UnavailablePool })),
			check: noLeaseIn(func(s *suite) string { return s.tg.UnavailablePool })},
		{Route: route, Condition: "pool at cap, every member Quarantined", Status: http.StatusServiceUnavailable, Reason: wire.ReasonPoolQuarantined,
			send:  post(allowed, createBody(func(s *suite, b map[string]any) { b["pool"] = s.tg.QuarantinedPool })),
			check: noLeaseIn(func(s *suite) string { return s.tg.QuarantinedPool })},
		{Route: "GET /v1/leases", Condition: "the caller's active leases, live queue positions", Status: http.StatusOK, Shape: ShapeLeases, poll: true,
			send: req(allowed, http.MethodGet, fixed("/v1/leases"), nil),
			check: func(s *suite, r response) error {
				ls, err := decodeLeases(r)
				if err != nil {
					return err
				}
				if b := findLease(ls, s.bound.ID); b == nil || b.Phase != wire.PhaseBound || b.QueuePosition != 0 || b.Alias != boundAlias {
					return fmt.Errorf("want Bound lease %s with queue_position 0 in %s", s.bound.ID, r)
				}
				if s.otherBound != nil && findLease(ls, s.otherBound.ID) != nil {
					return fmt.Errorf("another identity's lease %s is listed: %s", s.otherBound.ID, r)
				}
				return s.requirePositions(ls)
			}},
		{Route: "GET /v1/leases", Condition: "narrowed by alias and pool", Status: http.StatusOK, Shape: ShapeLeases,
			send: req(allowed, http.MethodGet, func(s *suite) string {
				return "/v1/leases?" + wire.LeaseFilter{Alias: boundAlias, Pool: s.tg.ReadyPool}.Query().Encode()
			}, nil),
			check: func(s *suite, r response) error {
				ls, err := decodeLeases(r)
				if err != nil {
					return err
				}
				if len(ls) != 1 || ls[0].ID != s.bound.ID {
					return fmt.Errorf("want exactly lease %s (alias %s): %s", s.bound.ID, boundAlias, r)
				}
				return nil
			}},
		{Route: "GET /v1/leases", Condition: "an alias no lease has", Status: http.StatusOK, Shape: ShapeLeases,
			send: req(allowed, http.MethodGet, fixed("/v1/leases?alias=no-such-alias"), nil),
			check: func(_ *suite, r response) error {
				ls, err := decodeLeases(r)
				if err != nil {
					return err
				}
				if len(ls) != 0 {
					return fmt.Errorf("want an empty list: %s", r)
				}
				return nil
			}},
		{Route: "GET /v1/leases", Condition: "an unknown query parameter", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: req(allowed, http.MethodGet, fixed("/v1/leases?alais=x"), nil)},
		{Route: "GET /v1/leases", Condition: "a malformed alias", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: req(allowed, http.MethodGet, fixed("/v1/leases?alias=Not%20An%20Alias"), nil)},
		{Route: "GET /v1/leases", Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: req(nil, http.MethodGet, fixed("/v1/leases"), nil)},
	}
}

// checkQueued checks a 202 answer: Pending at position pos, no
// kubeconfig, and records the lease.
func checkQueued(pos int) func(s *suite, r response) error {
	return func(s *suite, r response) error {
		l, err := decodeLease(r)
		if err != nil {
			return err
		}
		s.pending = append(s.pending, *l)
		if l.Phase != wire.PhasePending || l.QueuePosition != pos || l.Kubeconfig != "" || l.ClusterName != "" || l.ExpiresAt != nil {
			return fmt.Errorf("want a Pending lease at queue_position %d without kubeconfig, cluster or expiry: %s", pos, r)
		}
		return nil
	}
}

// noLeaseIn checks that the caller holds no lease in the pool: a 503 must
// not queue one.
func noLeaseIn(pool func(*suite) string) func(s *suite, r response) error {
	return func(s *suite, _ response) error {
		r, err := s.do(s.tg.Allowed, http.MethodGet, "/v1/leases", nil)
		if err != nil {
			return err
		}
		ls, err := decodeLeases(r)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if l.Pool == pool(s) {
				return fmt.Errorf("a lease of %s was queued despite the 503: %+v", pool(s), l)
			}
		}
		return nil
	}
}

func detailContains(word string) func(s *suite, r response) error {
	return func(_ *suite, r response) error {
		m, err := object(r.body)
		if err != nil {
			return err
		}
		if d, _ := m["detail"].(string); !strings.Contains(d, word) {
			return fmt.Errorf("detail does not name %q: %s", word, r)
		}
		return nil
	}
}

func boundPath(s *suite) string { return "/v1/leases/" + s.bound.ID }

func getLeaseCases() []Case {
	const route = "GET /v1/leases/{id}"
	get := func(creds func(*suite) apiclient.Credentials, path func(*suite) string) func(*suite) (response, error) {
		return req(creds, http.MethodGet, path, nil)
	}
	return []Case{
		{Route: route, Condition: "own Bound lease", Status: http.StatusOK, Shape: ShapeLease, poll: true,
			send: get(allowed, boundPath),
			check: func(s *suite, r response) error {
				l, err := decodeLease(r)
				if err != nil {
					return err
				}
				if l.ID != s.bound.ID || l.Phase != wire.PhaseBound || l.Kubeconfig == "" || l.QueuePosition != 0 || l.Alias != boundAlias {
					return fmt.Errorf("want lease %s Bound with its kubeconfig and alias: %s", s.bound.ID, r)
				}
				return nil
			}},
		{Route: route, Condition: "by alias", Status: http.StatusOK, Shape: ShapeLease, poll: true,
			send:  get(allowed, fixed("/v1/leases/"+boundAlias)),
			check: sameLease(func(s *suite) string { return s.bound.ID })},
		{Route: route, Condition: "by alias, another owner holds the same alias", Status: http.StatusOK, Shape: ShapeLease, poll: true,
			send:  get(other, fixed("/v1/leases/"+boundAlias)),
			check: sameLease(func(s *suite) string { return s.otherBound.ID })},
		{Route: route, Condition: "own Pending lease: live queue position", Status: http.StatusOK, Shape: ShapeLease, poll: true,
			send: func(s *suite) (response, error) {
				if len(s.pending) < 2 {
					return response{}, fmt.Errorf("want 2 pending leases, have %d", len(s.pending))
				}
				return s.do(s.tg.Allowed, http.MethodGet, "/v1/leases/"+s.pending[1].ID, nil)
			},
			check: func(s *suite, r response) error {
				l, err := decodeLease(r)
				if err != nil {
					return err
				}
				if l.ID != s.pending[1].ID || l.Phase != wire.PhasePending || l.QueuePosition != 2 || l.Kubeconfig != "" {
					return fmt.Errorf("want lease %s Pending at queue_position 2 without kubeconfig: %s", s.pending[1].ID, r)
				}
				return nil
			}},
		{Route: route, Condition: "another identity's lease", Status: http.StatusNotFound, Reason: wire.ReasonLeaseNotFound,
			send: get(other, boundPath)},
		{Route: route, Condition: "no such lease", Status: http.StatusNotFound, Reason: wire.ReasonLeaseNotFound,
			send: get(allowed, fixed("/v1/leases/"+missingLease))},
		{Route: route, Condition: "no such alias", Status: http.StatusNotFound, Reason: wire.ReasonLeaseNotFound,
			send: get(allowed, fixed("/v1/leases/no-such-alias"))},
		{Route: route, Condition: "malformed id", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: get(allowed, fixed("/v1/leases/"+malformedRef))},
		{Route: route, Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: get(nil, boundPath)},
	}
}

func sameLease(id func(*suite) string) func(s *suite, r response) error {
	return func(s *suite, r response) error {
		l, err := decodeLease(r)
		if err != nil {
			return err
		}
		if l.ID != id(s) {
			return fmt.Errorf("resolved to lease %s, want %s: %s", l.ID, id(s), r)
		}
		return nil
	}
}
