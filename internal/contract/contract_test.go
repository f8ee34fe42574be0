package contract

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestCoverage fails when the table stops covering a route, a status code
// or a reason of the contract (shared/notes/http-api.md and the decisions
// recorded in cases.go).
func TestCoverage(t *testing.T) {
	cases := Cases()
	routes := []string{
		"POST /v1/leases", "GET /v1/leases", "GET /v1/leases/{id}", "PATCH /v1/leases/{id}", "DELETE /v1/leases/{id}",
		"POST /v1/leases/{id}/heartbeat", "GET /v1/pools", "GET /v1/pools/{name}", "GET /v1/pools/{name}/leases", "GET /v1/status",
	}
	for _, route := range routes {
		if !slices.ContainsFunc(cases, func(c Case) bool { return c.Route == route && c.Status < 300 }) {
			t.Errorf("no success case for %s", route)
		}
		if !strings.HasPrefix(route, "GET /v1/status") &&
			!slices.ContainsFunc(cases, func(c Case) bool { return c.Route == route && c.Status == http.StatusUnauthorized }) {
			t.Errorf("no 401 case for %s", route)
		}
	}
	for _, code := range []int{200, 201, 202, 204, 400, 401, 403, 404, 405, 409, 410, 413, 429, 503} {
		if !slices.ContainsFunc(cases, func(c Case) bool { return c.Status == code }) {
			t.Errorf("no case answers %d", code)
		}
	}
	// Not provoked from outside: InternalError (a server fault),
	// TooManyRequests (200 requests held in flight at once) and
	// HostAPIUnavailable (the host API server busy), which the API server's
	// own tests cover.
	for _, reason := range []string{
		wire.ReasonBadRequest, wire.ReasonUnauthorized, wire.ReasonPoolNotAllowed, wire.ReasonPoolNotFound,
		wire.ReasonLeaseNotFound, wire.ReasonNotFound, wire.ReasonMethodNotAllowed, wire.ReasonExtensionLimitReached,
		wire.ReasonExtensionRefused, wire.ReasonAliasInUse, wire.ReasonBodyTooLarge, wire.ReasonConcurrentLeaseLimit, wire.ReasonQueuedLeaseLimit,
		wire.ReasonPoolBeingDeleted, wire.ReasonBackendUnavailable, wire.ReasonPoolQuarantined,
		wire.ReasonHeartbeatNotEnabled, wire.ReasonLeaseEnded,
	} {
		if !slices.ContainsFunc(cases, func(c Case) bool { return c.Reason == reason }) {
			t.Errorf("no case has reason %s", reason)
		}
	}
	for _, c := range cases {
		switch {
		case c.send == nil:
			t.Errorf("%s %s sends nothing", c.Route, c.Condition)
		case c.Status >= 400 && (c.Reason == "" || c.Shape != ""):
			t.Errorf("%s %s: an error case needs a reason and no shape", c.Route, c.Condition)
		case c.Status < 400 && (c.Reason != "" || c.Shape == ""):
			t.Errorf("%s %s: a success case needs a shape and no reason", c.Route, c.Condition)
		}
	}
	t.Log("\n" + Markdown())
}
