package wire

// LoginDiscoveryPath is where the API tells the CLI how people log in
// (GET, no credentials): the OIDC issuer, client and scopes of `kobe login`.
const LoginDiscoveryPath = "/.well-known/kunobi-auth"

// LoginDiscovery is the answer of GET /.well-known/kunobi-auth.
type LoginDiscovery struct {
	// Issuer is the OIDC issuer URL people log in with; an AccessPolicy
	// of method oidc must trust it, with ClientID among its audiences.
	Issuer string `json:"issuer"`
	// ClientID is the public OAuth client (no secret) the CLI logs in as;
	// the ID tokens it gets are issued for this audience.
	ClientID string `json:"client_id"`
	// Scopes the CLI asks for ("openid" among them).
	Scopes []string `json:"scopes"`
}

// ReasonLoginNotConfigured (404): the server publishes no login for
// people (the operator runs without --login-issuer).
const ReasonLoginNotConfigured = "LoginNotConfigured"
