package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/go-logr/logr"

	"github.com/kunobi-ninja/kobe/internal/leaseservice"
)

// servesTLS reports whether the API is served over HTTPS: with both a
// certificate and a key file.
func servesTLS(certFile, keyFile string) bool { return certFile != "" && keyFile != "" }

// hostKey is the context key of the request's Host header.
type hostKey struct{}

// withRequestHost puts the request's Host in its context: kubeconfigs of
// Proxy-mode members point at it when no ConnectURL is set.
func withRequestHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), hostKey{}, r.Host)))
	})
}

// ProxyEndpointOptions say where lease holders reach the connect proxy.
type ProxyEndpointOptions struct {
	// TLSCertFile and TLSKeyFile are Options' of the same names: without
	// both the API is not served over TLS, and there is no proxy to reach.
	TLSCertFile, TLSKeyFile string
	// ConnectURL is the base URL (https://host[:port]) under which lease
	// kubeconfigs of Proxy-mode members reach the connect proxy
	// (<ConnectURL>/connect/<lease>); empty derives it from each request's
	// Host (https://<Host>). The server's Start checks Options.ConnectURL,
	// which must be the same.
	ConnectURL string
	// TLSCAFile is the PEM CA that verifies the serving certificate, put in
	// Proxy-mode kubeconfigs; empty leaves them to the system's roots. It
	// is read again for every kubeconfig, so a rotated CA is handed out.
	TLSCAFile string
	// Log receives why the CA file could not be read, which callers are
	// not told.
	Log logr.Logger
}

// ProxyEndpoint returns leaseservice.Options.ProxyEndpoint for a service
// behind this package's Server: ConnectURL, else https://<the request's
// Host> (which the Server puts in the request's context), and the CA of
// TLSCAFile. Without TLS there is none: a Proxy-mode kubeconfig is refused,
// never downgraded to Direct.
func ProxyEndpoint(o ProxyEndpointOptions) func(ctx context.Context) (string, []byte, error) {
	return func(ctx context.Context) (string, []byte, error) {
		if !servesTLS(o.TLSCertFile, o.TLSKeyFile) {
			return "", nil, fmt.Errorf("%w: this pool's members are reached through kobe's connect proxy, which needs the API served over TLS; start kobe-operator with --api-tls-cert-file, --api-tls-key-file and --api-tls-ca-file (and --connect-url when callers reach it under another name), or give the pool spec.access.mode: Direct", leaseservice.ErrProxyNotConfigured)
		}
		var ca []byte
		if o.TLSCAFile != "" {
			var err error
			if ca, err = os.ReadFile(o.TLSCAFile); err != nil {
				o.Log.Error(err, "Reading the API's CA file failed", "file", o.TLSCAFile)
				return "", nil, fmt.Errorf("%w: the CA file of the API's certificate (--api-tls-ca-file) cannot be read; the operator's log says why", leaseservice.ErrProxyNotConfigured)
			}
		}
		if o.ConnectURL != "" {
			return o.ConnectURL, ca, nil
		}
		host, _ := ctx.Value(hostKey{}).(string)
		if host == "" || strings.ContainsAny(host, "/\\@?#") {
			return "", nil, fmt.Errorf("%w: the request names no usable host; start kobe-operator with --connect-url", leaseservice.ErrProxyNotConfigured)
		}
		return "https://" + host, ca, nil
	}
}
