package contract

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// heartbeatCases: POST /v1/leases/{id}/heartbeat renews a lease created
// with heartbeat_timeout; nothing else takes one.
func heartbeatCases() []Case {
	const route = "POST /v1/leases/{id}/heartbeat"
	var beating *wire.Lease
	beat := func(s *suite, c apiclient.Credentials, id string) (response, error) {
		return s.do(c, http.MethodPost, "/v1/leases/"+id+"/heartbeat", nil)
	}
	return []Case{
		{Route: "POST /v1/leases", Condition: "heartbeat_timeout below 10s", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: req(allowed, http.MethodPost, fixed("/v1/leases"), func(s *suite) any {
				return wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, HeartbeatTimeout: "5s"}
			}),
			check: detailContains("heartbeat_timeout")},
		{Route: "POST /v1/leases", Condition: "heartbeat_timeout is not a duration", Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest,
			send: req(allowed, http.MethodPost, fixed("/v1/leases"), func(s *suite) any {
				return wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, HeartbeatTimeout: "often"}
			}),
			check: detailContains("heartbeat_timeout")},
		{Route: route, Condition: "own lease with a heartbeat timeout", Status: http.StatusOK, Shape: ShapeLease,
			send: func(s *suite) (response, error) {
				l, err := s.create(s.tg.Allowed, wire.CreateLeaseRequest{Pool: s.tg.ReadyPool, TTL: "10m", HeartbeatTimeout: "2m"}, http.StatusCreated)
				if err != nil {
					return response{}, err
				}
				if l.HeartbeatTimeout != "2m" || l.HeartbeatEndsAt == nil {
					return response{}, fmt.Errorf("created lease: heartbeat_timeout %q, heartbeat_ends_at %v; want 2m and a time", l.HeartbeatTimeout, l.HeartbeatEndsAt)
				}
				beating = l
				if err := s.waitVisible(s.tg.Allowed, l.ID); err != nil {
					return response{}, err
				}
				return beat(s, s.tg.Allowed, l.ID)
			},
			check: func(_ *suite, r response) error {
				l, err := decodeLease(r)
				if err != nil {
					return err
				}
				switch {
				case l.ID != beating.ID || l.HeartbeatTimeout != "2m":
					return fmt.Errorf("answer names %s with heartbeat_timeout %q, want %s and 2m", l.ID, l.HeartbeatTimeout, beating.ID)
				case l.Kubeconfig != "":
					return errors.New("a heartbeat's answer carries the kubeconfig")
				case l.HeartbeatEndsAt == nil || l.HeartbeatEndsAt.Before(*beating.HeartbeatEndsAt):
					return fmt.Errorf("heartbeat_ends_at %v, want no earlier than the create's %v", l.HeartbeatEndsAt, beating.HeartbeatEndsAt)
				}
				return nil
			}},
		{Route: route, Condition: "another identity's lease", Status: http.StatusNotFound, Reason: wire.ReasonLeaseNotFound,
			send: func(s *suite) (response, error) { return beat(s, s.tg.Other, beating.ID) }},
		{Route: route, Condition: "lease without a heartbeat timeout", Status: http.StatusConflict, Reason: wire.ReasonHeartbeatNotEnabled,
			send: func(s *suite) (response, error) { return beat(s, s.tg.Allowed, s.bound.ID) }},
		{Route: route, Condition: "no such lease", Status: http.StatusNotFound, Reason: wire.ReasonLeaseNotFound,
			send: func(s *suite) (response, error) { return beat(s, s.tg.Allowed, missingLease) }},
		{Route: route, Condition: "no credentials", Status: http.StatusUnauthorized, Reason: wire.ReasonUnauthorized,
			send: func(s *suite) (response, error) {
				return beat(s, nil, beating.ID)
			}},
		{Route: route, Condition: "released lease", Status: http.StatusGone, Reason: wire.ReasonLeaseEnded,
			send: func(s *suite) (response, error) {
				r, err := s.do(s.tg.Allowed, http.MethodDelete, "/v1/leases/"+beating.ID, nil)
				if err != nil {
					return response{}, err
				}
				if r.code != http.StatusNoContent {
					return response{}, fmt.Errorf("releasing %s: %s", beating.ID, r)
				}
				// A server answering from a cache may take a moment to see
				// its own release; the beat is sent once a read shows it.
				if err := s.eventually(func() error {
					r, l, err := s.get(s.tg.Allowed, beating.ID)
					if err != nil || l == nil || !wire.PhaseEnded(l.Phase) {
						return fmt.Errorf("lease %s not ended yet: %w %s", beating.ID, err, r)
					}
					return nil
				}); err != nil {
					return response{}, err
				}
				return beat(s, s.tg.Allowed, beating.ID)
			}},
	}
}
