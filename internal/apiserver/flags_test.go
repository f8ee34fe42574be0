package apiserver_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

func TestFlagDefaults(t *testing.T) {
	f, err := flagtest.Validate[apiserver.Flags](t)
	want := apiserver.Flags{MaxInFlight: apiserver.DefaultMaxInFlight,
		ConnectMaxInFlight: connect.DefaultMaxInFlight, ConnectMaxStreamsPerLease: connect.DefaultMaxStreamsPerLease,
		LoginScopes: apiserver.DefaultLoginScopes, MaxImageBytes: apiserver.DefaultMaxImageBytes, MaxImageLoads: apiserver.DefaultMaxImageLoads}
	if f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	flagtest.Refused(t, err, "")
	f = flagtest.Parse[apiserver.Flags](t, "--api-bind-address=:8443", "--api-tls-cert-file=c", "--api-tls-key-file=k", "--api-tls-ca-file=ca",
		"--connect-url=https://kobe.example", "--api-max-in-flight=5", "--connect-max-in-flight=6", "--connect-max-streams-per-lease=7",
		"--image-load-max-bytes=1000", "--image-loads=3", "--image-load-dir=/var/tmp/kobe")
	want = apiserver.Flags{BindAddress: ":8443", TLSCertFile: "c", TLSKeyFile: "k", TLSCAFile: "ca",
		ConnectURL: "https://kobe.example", MaxInFlight: 5, ConnectMaxInFlight: 6, ConnectMaxStreamsPerLease: 7,
		LoginScopes: apiserver.DefaultLoginScopes, MaxImageBytes: 1000, MaxImageLoads: 3, ImageDir: "/var/tmp/kobe"}
	if f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
}

// TestFlagsApply: the flags reach the server, the connect proxy and the
// proxy endpoint, and the server and the endpoint get the same TLS files and
// connect URL.
func TestFlagsApply(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("the CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := flagtest.Parse[apiserver.Flags](t, "--api-bind-address=:8443", "--api-tls-cert-file=c", "--api-tls-key-file=k", "--api-tls-ca-file="+ca,
		"--connect-url=https://kobe.example", "--api-max-in-flight=5", "--connect-max-in-flight=6", "--connect-max-streams-per-lease=7",
		"--image-load-max-bytes=1000", "--image-loads=3", "--image-load-dir=/var/tmp/kobe")
	var o apiserver.Options
	f.Apply(&o)
	if o.Addr != ":8443" || o.TLSCertFile != "c" || o.TLSKeyFile != "k" || o.ConnectURL != "https://kobe.example" || o.MaxInFlight != 5 ||
		o.MaxImageBytes != 1000 || o.MaxImageLoads != 3 || o.ImageDir != "/var/tmp/kobe" {
		t.Errorf("server options %+v", o)
	}
	if o.Login != nil {
		t.Errorf("a login is published without --login-issuer: %+v", o.Login)
	}
	var c connect.Options
	f.ApplyConnect(&c)
	if c.MaxInFlight != 6 || c.MaxStreamsPerLease != 7 {
		t.Errorf("connect options: max in flight %d, per lease %d; want 6, 7", c.MaxInFlight, c.MaxStreamsPerLease)
	}
	url, caPEM, err := f.ProxyEndpoint(logr.Discard())(t.Context())
	if err != nil || url != "https://kobe.example" || string(caPEM) != "the CA" {
		t.Errorf("proxy endpoint = %q, %q, %v; want the connect URL and the CA file", url, caPEM, err)
	}
	f.TLSCertFile = ""
	if _, _, err := f.ProxyEndpoint(logr.Discard())(t.Context()); !errors.Is(err, leaseservice.ErrProxyNotConfigured) {
		t.Errorf("proxy endpoint without TLS: %v, want ErrProxyNotConfigured", err)
	}
}

// TestLoginFlags: --login-issuer and --login-client-id go together, the
// issuer is https (http on loopback only), and the scopes published always
// include openid.
func TestLoginFlags(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		refuse string
	}{
		{"issuer alone", []string{"--login-issuer=https://idp.example.com"}, "--login-issuer and --login-client-id go together"},
		{"client alone", []string{"--login-client-id=kobe"}, "--login-issuer and --login-client-id go together"},
		{"plain http elsewhere", []string{"--login-issuer=http://idp.example.com", "--login-client-id=kobe"}, `--login-issuer "http://idp.example.com" must be https://`},
		{"not a URL", []string{"--login-issuer=idp.example.com", "--login-client-id=kobe"}, `--login-issuer "idp.example.com" is not an issuer URL`},
		{"a query", []string{"--login-issuer=https://idp.example.com/?x=1", "--login-client-id=kobe"}, `--login-issuer "https://idp.example.com/?x=1" is not an issuer URL`},
		{"no scope", []string{"--login-issuer=https://idp.example.com", "--login-client-id=kobe", "--login-scopes= , "}, "--login-scopes names no scope"},
		{"https", []string{"--login-issuer=https://idp.example.com/realms/x", "--login-client-id=kobe"}, ""},
		{"http on loopback", []string{"--login-issuer=http://127.0.0.1:5556", "--login-client-id=kobe"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := flagtest.Validate[apiserver.Flags](t, tc.args...)
			flagtest.Refused(t, err, tc.refuse)
		})
	}
	f := flagtest.Parse[apiserver.Flags](t, "--login-issuer=https://idp.example.com", "--login-client-id=kobe-cli", "--login-scopes=email, groups,email")
	var o apiserver.Options
	f.Apply(&o)
	want := wire.LoginDiscovery{Issuer: "https://idp.example.com", ClientID: "kobe-cli", Scopes: []string{"openid", "email", "groups"}}
	if o.Login == nil || !reflect.DeepEqual(*o.Login, want) {
		t.Errorf("published login %+v, want %+v", o.Login, want)
	}
}

// TestTrustedProxyFlag: --trusted-proxy-cidrs takes CIDRs and single
// addresses, reaches the server as ranges (a mapped IPv4 range as the IPv4
// addresses the server compares it with), and refuses what does not parse
// and a range that trusts every address.
func TestTrustedProxyFlag(t *testing.T) {
	for _, tc := range []struct {
		name, value, refuse string
	}{
		{"garbage", "ingress", `--trusted-proxy-cidrs: "ingress" is neither a CIDR`},
		{"one bad among good", "10.0.0.0/8,10.0.0.0/33", `--trusted-proxy-cidrs: "10.0.0.0/33" is neither`},
		{"an address with a zone", "fe80::1%eth0", `--trusted-proxy-cidrs: "fe80::1%eth0" is neither`},
		{"every IPv4 address", "0.0.0.0/0", `--trusted-proxy-cidrs: "0.0.0.0/0" trusts every address`},
		{"every IPv6 address", "10.0.0.0/8, ::/0", `--trusted-proxy-cidrs: "::/0" trusts every address`},
		{"ranges and addresses", "10.0.0.0/24, 192.168.1.1,fd00::/64", ""},
		{"empty", " , ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := flagtest.Validate[apiserver.Flags](t, "--trusted-proxy-cidrs="+tc.value)
			flagtest.Refused(t, err, tc.refuse)
		})
	}
	f := flagtest.Parse[apiserver.Flags](t, "--trusted-proxy-cidrs=10.0.0.7/24, 192.168.1.1,fd00::/64,::ffff:10.1.0.0/112")
	var o apiserver.Options
	f.Apply(&o)
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("192.168.1.1/32"),
		netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("10.1.0.0/16")}
	if !reflect.DeepEqual(o.TrustedProxies, want) {
		t.Errorf("trusted proxies %v, want %v", o.TrustedProxies, want)
	}
	o = apiserver.Options{}
	flagtest.Parse[apiserver.Flags](t).Apply(&o)
	if o.TrustedProxies != nil {
		t.Errorf("trusted proxies %v by default, want none", o.TrustedProxies)
	}
}
