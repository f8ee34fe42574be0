package auth

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// loopbackHint names the hosts to which plain http is allowed.
const loopbackHint = "plain http only to a loopback host: 127.0.0.0/8, ::1 or localhost"

// ValidateIssuer reports why issuer cannot be an OIDC issuer: kobe sends
// the issuer's discovery and key requests from the operator's network, so
// it must be https (plain http only to loopback, for tests) and, as OpenID
// Connect Discovery requires, carry no user info, query or fragment (a query
// would survive the /.well-known suffix and address another resource).
func ValidateIssuer(issuer string) error {
	u, err := url.Parse(issuer)
	if err != nil {
		return fmt.Errorf("oidc.issuer is not a URL: %w", err)
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return errors.New("oidc.issuer must have no user info, query or fragment")
	}
	if err := SecureURL(u); err != nil {
		return fmt.Errorf("oidc.issuer %w", err)
	}
	return nil
}

// SecureURL reports whether kobe may fetch u on an issuer's behalf (the
// issuer itself, its jwks_uri, a redirect): https, or http to a loopback
// host.
func SecureURL(u *url.URL) error {
	host := u.Hostname()
	switch {
	case host == "":
		return errors.New("must be an absolute URL with a host")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopback(host):
		return nil
	}
	return fmt.Errorf("must use https (%s), not %s://%s", loopbackHint, u.Scheme, u.Host)
}

// isLoopback is true for localhost and loopback addresses only: names are
// not resolved, so a name that points at 127.0.0.1 is still refused.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// oidcIssuerError is ValidateIssuer for a policy's oidc method; nil when the
// policy has none.
func oidcIssuerError(o *kobev1.OIDCAuth) error {
	if o == nil {
		return nil
	}
	return ValidateIssuer(o.Issuer)
}
