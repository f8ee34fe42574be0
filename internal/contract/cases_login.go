package contract

import (
	"net/http"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// loginCases are GET /.well-known/kunobi-auth on a server that publishes
// no login (the targets run without --login-issuer): a JSON 404 with its
// own reason, for credentials or none, so that `kobe login` can tell "no
// login here" from an unknown route; other methods are 405.
func loginCases() []Case {
	const route = "GET " + wire.LoginDiscoveryPath
	return []Case{
		{Route: route, Condition: "no login configured, no credentials", Status: http.StatusNotFound, Reason: wire.ReasonLoginNotConfigured,
			send: req(nil, http.MethodGet, fixed(wire.LoginDiscoveryPath), nil)},
		{Route: route, Condition: "no login configured, with credentials", Status: http.StatusNotFound, Reason: wire.ReasonLoginNotConfigured,
			send: req(allowed, http.MethodGet, fixed(wire.LoginDiscoveryPath), nil)},
		{Route: "POST " + wire.LoginDiscoveryPath, Condition: "method not allowed", Status: http.StatusMethodNotAllowed, Reason: wire.ReasonMethodNotAllowed,
			send: req(nil, http.MethodPost, fixed(wire.LoginDiscoveryPath), nil)},
	}
}
