package apiserver

import (
	"net/http"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// loginDiscovery: GET /.well-known/kunobi-auth tells `kobe login` which
// OIDC issuer, client and scopes people log in with. It needs no
// credentials (the caller has none yet) and says nothing the issuer's own
// discovery does not; without --login-issuer it is a 404.
func (s *Server) loginDiscovery(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Login == nil {
		writeError(w, http.StatusNotFound, wire.ReasonLoginNotConfigured, "login not configured",
			"this server publishes no OIDC login for people (the operator's --login-issuer is unset): configure a token, SSH key or ID token with `kobe config set`")
		return
	}
	writeJSON(w, http.StatusOK, s.opts.Login)
}
