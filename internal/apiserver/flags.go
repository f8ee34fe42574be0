package apiserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Flags are the operator's flags of the lease API and its connect proxy.
type Flags struct {
	// BindAddress is Options.Addr as given: empty for the default, which
	// the operator resolves with its listen rules (loopback unless TLS or
	// --bind-all-interfaces).
	BindAddress string
	// TLSCertFile, TLSKeyFile, MaxInFlight and ConnectURL are Options'
	// fields of the same names (Apply); TLSCAFile is ProxyEndpointOptions'
	// (ProxyEndpoint, which shares the TLS files and ConnectURL).
	// ConnectMaxInFlight and ConnectMaxStreamsPerLease are the connect
	// proxy's MaxInFlight and MaxStreamsPerLease (ApplyConnect).
	TLSCertFile, TLSKeyFile, TLSCAFile            string
	MaxInFlight                                   int
	ConnectURL                                    string
	ConnectMaxInFlight, ConnectMaxStreamsPerLease int
	// LoginIssuer, LoginClientID and LoginScopes (comma-separated) are what
	// GET /.well-known/kunobi-auth publishes for `kobe login` (Apply).
	LoginIssuer, LoginClientID, LoginScopes string
	// TrustedProxyCIDRs is Options.TrustedProxies as given: comma-separated
	// CIDRs or addresses (Apply).
	TrustedProxyCIDRs string
	// MaxImageBytes, MaxImageLoads and ImageDir are Options' (Apply).
	MaxImageBytes int64
	MaxImageLoads int
	ImageDir      string
}

// DefaultLoginScopes are the scopes `kobe login` asks for when
// --login-scopes is not given: the ID token (openid), the claims policies
// usually map (email, profile), and a refresh token (offline_access).
const DefaultLoginScopes = "openid,email,profile,offline_access"

// Bind registers the flags on fs with their defaults.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.StringVar(&f.BindAddress, "api-bind-address", "", "Address of the lease HTTP API (default 127.0.0.1:8090; :8090 with --api-tls-cert-file or --bind-all-interfaces).")
	fs.StringVar(&f.TLSCertFile, "api-tls-cert-file", "", "Serve the lease API over HTTPS with this certificate (and --api-tls-key-file); both files are read again when they change, so a renewed certificate is served without a restart.")
	fs.StringVar(&f.TLSKeyFile, "api-tls-key-file", "", "Key of --api-tls-cert-file.")
	fs.IntVar(&f.MaxInFlight, "api-max-in-flight", DefaultMaxInFlight, "Concurrent API requests served before answering 429.")
	fs.StringVar(&f.TLSCAFile, "api-tls-ca-file", "", "PEM CA that verifies --api-tls-cert-file, put in the kubeconfigs of leases reached through the connect proxy (pools with access mode Proxy); empty leaves them to the system's trust roots.")
	fs.StringVar(&f.ConnectURL, "connect-url", "", "Base URL (https://host[:port]) under which lease holders reach the connect proxy: Proxy-mode kubeconfigs point at <url>/connect/<lease>. Empty: https://<the Host of the API request that returned the kubeconfig>. Proxy access needs --api-tls-cert-file.")
	fs.IntVar(&f.ConnectMaxStreamsPerLease, "connect-max-streams-per-lease", connect.DefaultMaxStreamsPerLease, "Concurrent connect proxy requests of one lease on this replica (watches, exec, attach, logs -f and port-forward sessions included) before answering 429, so that one lease cannot take every --connect-max-in-flight slot.")
	fs.StringVar(&f.LoginIssuer, "login-issuer", "", "OIDC issuer URL that people log in with (`kobe login`), published at GET /.well-known/kunobi-auth; an AccessPolicy of method oidc must trust it with --login-client-id among its audiences. Empty: no login is published (404).")
	fs.StringVar(&f.LoginClientID, "login-client-id", "", "Public OAuth client ID (no secret; device and authorization code + PKCE flows, redirect http://127.0.0.1) of --login-issuer; its ID tokens carry it as their audience.")
	fs.StringVar(&f.LoginScopes, "login-scopes", DefaultLoginScopes, "Comma-separated scopes `kobe login` asks --login-issuer for; openid is added when missing.")
	fs.StringVar(&f.TrustedProxyCIDRs, "trusted-proxy-cidrs", "", "Comma-separated CIDRs (or addresses) of the proxies in front of the lease API, such as an ingress controller's pods. Only a connection from one of them has its X-Forwarded-For read: the caller is the right-most address in it that is not itself a trusted proxy, and the per-source limits charge that caller instead of the proxy. Empty: the header is ignored and each connection's peer is its caller.")
	fs.Int64Var(&f.MaxImageBytes, "image-load-max-bytes", DefaultMaxImageBytes, "Largest image archive `kobe load` may send, and the most it may unpack to (413 beyond it).")
	fs.IntVar(&f.MaxImageLoads, "image-loads", DefaultMaxImageLoads, "Image loads (`kobe load`) served at once before answering 429; each holds up to three times --image-load-max-bytes in --image-load-dir while it runs (the upload, a gzip archive unpacked, the copy the nodes import).")
	fs.StringVar(&f.ImageDir, "image-load-dir", "", "Directory that holds image archives while `kobe load` imports them (default: the system's temporary directory); give it room for --image-loads times three times --image-load-max-bytes.")
	fs.IntVar(&f.ConnectMaxInFlight, "connect-max-in-flight", connect.DefaultMaxInFlight, "Concurrent connect proxy requests (open watches and exec, attach, logs -f and port-forward sessions included) served before answering 429; separate from --api-max-in-flight.")
}

// Validate refuses --trusted-proxy-cidrs that do not parse or trust every
// address, a login half configured, or an issuer that is not an https://
// URL (http:// on loopback only, for tests). The address is
// resolved by the operator's listen rules, limits of 0 or less take the
// defaults (New and connect.New), and Start checks --connect-url against
// TLS and loads the certificate.
func (f Flags) Validate() error {
	if _, err := f.trustedProxies(); err != nil {
		return err
	}
	if (f.LoginIssuer == "") != (f.LoginClientID == "") {
		return errors.New("--login-issuer and --login-client-id go together: give both to publish a login for `kobe login`, or neither")
	}
	if f.LoginIssuer == "" {
		return nil
	}
	u, err := url.Parse(f.LoginIssuer)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--login-issuer %q is not an issuer URL such as https://idp.example.com", f.LoginIssuer)
	}
	if u.Scheme != "https" && (u.Scheme != "http" || !isLoopback(u.Hostname())) {
		return fmt.Errorf("--login-issuer %q must be https:// (http:// only on loopback)", f.LoginIssuer)
	}
	if len(f.loginScopes()) == 0 {
		return errors.New("--login-scopes names no scope")
	}
	return nil
}

// loginScopes are --login-scopes as a list, with openid first when missing.
func (f Flags) loginScopes() []string {
	var scopes []string
	for s := range strings.SplitSeq(f.LoginScopes, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	if len(scopes) > 0 && !slices.Contains(scopes, "openid") {
		scopes = append([]string{"openid"}, scopes...)
	}
	return scopes
}

// trustedProxies parses --trusted-proxy-cidrs. A range that holds every
// address is refused: any caller could then name itself anyone.
func (f Flags) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for v := range strings.SplitSeq(f.TrustedProxyCIDRs, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			addr, aerr := netip.ParseAddr(v)
			if aerr != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("--trusted-proxy-cidrs: %q is neither a CIDR such as 10.0.0.0/8 nor an address", v)
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("--trusted-proxy-cidrs: %q trusts every address, so any caller could name itself anyone", v)
		}
		// A mapped IPv4 range (::ffff:10.0.0.0/104) matches the IPv4
		// addresses the server sees (clientAddr unmaps them).
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// Apply sets the server's options that come from the flags: the address,
// the TLS files, the connect URL, the in-flight limit, the trusted proxies
// and the login that GET /.well-known/kunobi-auth publishes.
func (f Flags) Apply(o *Options) {
	o.Addr, o.MaxInFlight = f.BindAddress, f.MaxInFlight
	o.TLSCertFile, o.TLSKeyFile, o.ConnectURL = f.TLSCertFile, f.TLSKeyFile, f.ConnectURL
	o.MaxImageBytes, o.MaxImageLoads, o.ImageDir = f.MaxImageBytes, f.MaxImageLoads, f.ImageDir
	// Validate refused what does not parse.
	o.TrustedProxies, _ = f.trustedProxies()
	if f.LoginIssuer != "" {
		o.Login = &wire.LoginDiscovery{Issuer: f.LoginIssuer, ClientID: f.LoginClientID, Scopes: f.loginScopes()}
	}
}

// ApplyConnect sets the connect proxy's limits from the flags.
func (f Flags) ApplyConnect(o *connect.Options) {
	o.MaxInFlight, o.MaxStreamsPerLease = f.ConnectMaxInFlight, f.ConnectMaxStreamsPerLease
}

// ProxyEndpoint is where Proxy-mode kubeconfigs point (ProxyEndpoint), from
// the same TLS files and connect URL that Apply gives the server, so the
// two cannot disagree.
func (f Flags) ProxyEndpoint(log logr.Logger) func(ctx context.Context) (string, []byte, error) {
	return ProxyEndpoint(ProxyEndpointOptions{
		TLSCertFile: f.TLSCertFile, TLSKeyFile: f.TLSKeyFile, TLSCAFile: f.TLSCAFile, ConnectURL: f.ConnectURL, Log: log,
	})
}
