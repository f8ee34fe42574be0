package contract

import (
	"fmt"
	"net/http"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// defaultMaxQueuedPerOwner is the server's default cap on one caller's
// waiting leases (--max-queued-per-owner).
const defaultMaxQueuedPerOwner = 10

// limitCases run last: they fill Other's queue in EmptyPool.
func limitCases() []Case {
	const route = "POST /v1/leases"
	return []Case{
		{Route: route, Condition: "queued lease limit reached (no maxConcurrentLeases)", Status: http.StatusTooManyRequests, Reason: wire.ReasonQueuedLeaseLimit,
			send: func(s *suite) (response, error) {
				max := s.tg.MaxQueuedPerOwner
				if max == 0 {
					max = defaultMaxQueuedPerOwner
				}
				waiting, err := s.waitingOf(s.tg.Other)
				if err != nil {
					return response{}, err
				}
				for range max - waiting {
					if _, err := s.create(s.tg.Other, wire.CreateLeaseRequest{Pool: s.tg.EmptyPool, TTL: "10m"}, http.StatusAccepted); err != nil {
						return response{}, err
					}
				}
				return s.do(s.tg.Other, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: s.tg.EmptyPool, TTL: "10m"})
			},
			check: func(s *suite, _ response) error {
				max := s.tg.MaxQueuedPerOwner
				if max == 0 {
					max = defaultMaxQueuedPerOwner
				}
				waiting, err := s.waitingOf(s.tg.Other)
				if err != nil {
					return err
				}
				if waiting != max {
					return fmt.Errorf("%d leases of Other waiting after the refusal, want %d: the refused request left one", waiting, max)
				}
				return nil
			}},
	}
}

// waitingOf counts creds' Pending leases in EmptyPool.
func (s *suite) waitingOf(creds apiclient.Credentials) (int, error) {
	r, err := s.do(creds, http.MethodGet, "/v1/leases", nil)
	if err != nil {
		return 0, err
	}
	ls, err := decodeLeases(r)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range ls {
		if l.Pool == s.tg.EmptyPool && l.Phase == wire.PhasePending {
			n++
		}
	}
	return n, nil
}
