package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
)

// Connect is the connect proxy (for tests).
func (s *Server) Connect() *connect.Proxy { return s.connect }

// serveTLS reports whether the API is served over HTTPS.
func (s *Server) serveTLS() bool { return s.opts.TLSCertFile != "" && s.opts.TLSKeyFile != "" }

// hostKey is the context key of the request's Host header.
type hostKey struct{}

// withRequestHost puts the request's Host in its context: kubeconfigs of
// Proxy-mode members point at it when no ConnectURL is set.
func withRequestHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), hostKey{}, r.Host)))
	})
}

// proxyEndpoint is leaseservice.Options.ProxyEndpoint: ConnectURL, else
// https://<the request's Host>, and the CA of TLSCAFile. Without TLS there
// is none: a Proxy-mode kubeconfig is refused, never downgraded to Direct.
func (s *Server) proxyEndpoint(ctx context.Context) (string, []byte, error) {
	if !s.serveTLS() {
		return "", nil, fmt.Errorf("%w: this pool's members are reached through kobe's connect proxy, which needs the API served over TLS; start kobe-operator with --api-tls-cert-file, --api-tls-key-file and --api-tls-ca-file (and --connect-url when callers reach it under another name), or give the pool spec.access.mode: Direct", leaseservice.ErrProxyNotConfigured)
	}
	var ca []byte
	if s.opts.TLSCAFile != "" {
		var err error
		if ca, err = os.ReadFile(s.opts.TLSCAFile); err != nil {
			s.opts.Log.Error(err, "Reading the API's CA file failed", "file", s.opts.TLSCAFile)
			return "", nil, fmt.Errorf("%w: the CA file of the API's certificate (--api-tls-ca-file) cannot be read; the operator's log says why", leaseservice.ErrProxyNotConfigured)
		}
	}
	if s.opts.ConnectURL != "" {
		return s.opts.ConnectURL, ca, nil
	}
	host, _ := ctx.Value(hostKey{}).(string)
	if host == "" || strings.ContainsAny(host, "/\\@?#") {
		return "", nil, fmt.Errorf("%w: the request names no usable host; start kobe-operator with --connect-url", leaseservice.ErrProxyNotConfigured)
	}
	return "https://" + host, ca, nil
}
