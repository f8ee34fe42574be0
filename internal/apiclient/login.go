package apiclient

import (
	"context"
	"net/http"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// LoginDiscovery reads GET /.well-known/kunobi-auth: the OIDC issuer,
// client and scopes people log in with. Call it on a client with
// Anonymous credentials: the route needs none, and a login must not send
// the credentials it replaces. A server without a login answers 404
// (wire.ReasonLoginNotConfigured; IsNotFound).
func (c *Client) LoginDiscovery(ctx context.Context) (*wire.LoginDiscovery, error) {
	var d wire.LoginDiscovery
	if _, err := c.do(ctx, http.MethodGet, wire.LoginDiscoveryPath, nil, &d, http.StatusOK); err != nil {
		return nil, err
	}
	return &d, nil
}
