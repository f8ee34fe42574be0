package apiserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/leaseservice"
)

// TestProxyEndpoint: kubeconfigs of Proxy-mode members point at ConnectURL,
// else at the request's Host, with the CA file's contents; without TLS, with
// an unreadable CA file or without a usable Host there is no endpoint, and
// the error says what to configure.
func TestProxyEndpoint(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, []byte("the CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsOpts := ProxyEndpointOptions{TLSCertFile: "tls.crt", TLSKeyFile: "tls.key", Log: logr.Discard()}
	with := func(f func(*ProxyEndpointOptions)) ProxyEndpointOptions {
		o := tlsOpts
		f(&o)
		return o
	}
	for _, tt := range []struct {
		name     string
		opts     ProxyEndpointOptions
		host     string // "" leaves the context without one
		wantBase string
		wantCA   string
		wantErr  string
	}{
		{"the request's host", tlsOpts, "kobe.example.com:8443", "https://kobe.example.com:8443", "", ""},
		{"the connect URL over the host", with(func(o *ProxyEndpointOptions) { o.ConnectURL = "https://connect.example.com" }),
			"kobe.example.com", "https://connect.example.com", "", ""},
		{"the CA file", with(func(o *ProxyEndpointOptions) { o.TLSCAFile = caFile }), "kobe.example.com", "https://kobe.example.com", "the CA", ""},
		{"no TLS", ProxyEndpointOptions{ConnectURL: "https://connect.example.com", Log: logr.Discard()}, "kobe.example.com", "", "", "--api-tls-cert-file"},
		{"only a certificate", ProxyEndpointOptions{TLSCertFile: "tls.crt", Log: logr.Discard()}, "kobe.example.com", "", "", "needs the API served over TLS"},
		{"an unreadable CA file", with(func(o *ProxyEndpointOptions) { o.TLSCAFile = filepath.Join(dir, "missing.crt") }),
			"kobe.example.com", "", "", "--api-tls-ca-file"},
		{"no host", tlsOpts, "", "", "", "names no usable host"},
		{"a host with a path", tlsOpts, "kobe.example.com/evil", "", "", "names no usable host"},
		{"a host with userinfo", tlsOpts, "user@kobe.example.com", "", "", "names no usable host"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.host != "" {
				ctx = context.WithValue(ctx, hostKey{}, tt.host)
			}
			base, ca, err := ProxyEndpoint(tt.opts)(ctx)
			if tt.wantErr != "" {
				if !errors.Is(err, leaseservice.ErrProxyNotConfigured) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want ErrProxyNotConfigured saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || base != tt.wantBase || string(ca) != tt.wantCA {
				t.Fatalf("got %q, CA %q, %v; want %q, CA %q", base, ca, err, tt.wantBase, tt.wantCA)
			}
		})
	}
}
