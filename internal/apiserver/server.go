package apiserver

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/connect"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/truncate"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Defaults of Options.
const (
	DefaultMaxInFlight  = 200
	DefaultMaxBodyBytes = 64 << 10
	// DefaultBodyReadTimeout bounds reading a request body, which happens
	// before the request takes an in-flight slot.
	DefaultBodyReadTimeout = 10 * time.Second
)

// maxHeaderBytes bounds a request's line and headers (net/http answers 431
// beyond it), on the lease API and on the connect proxy, which share the
// port. Go's default is 1 MiB, which any caller, credentials or not, could
// make every connection hold. The largest legitimate request is a KobeSSH
// signature at sshsig.MaxHeaderLen (16 KiB, for a 16384-bit RSA key; an
// ed25519 one is 0.4 KiB) with a request line and a few small headers; a
// bearer token (a ServiceAccount token is about 1 KiB, an OIDC ID token
// rarely over 8 KiB) is smaller, and any longer than about 30 KiB is now
// refused here rather than by auth's 64 KiB bound. kubectl through the
// connect proxy sends a client certificate, not a header, and a few short
// headers; its longest lines are queries (label selectors, exec commands),
// which the ingress controllers that commonly front an API refuse well
// below this (nginx 8 KiB per line).
const maxHeaderBytes = 32 << 10

// Authenticator turns a request into a Principal (see package auth).
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request, body []byte) (*auth.Principal, error)
	// AuthenticateSum authenticates a request whose body is streamed after
	// it, known by the SHA-256 its caller declared (and signed).
	AuthenticateSum(ctx context.Context, r *http.Request, bodySum [sha256.Size]byte) (*auth.Principal, error)
	Methods() []string
	// Audience is what KobeSSH signatures must name ("" without SSH).
	Audience() string
}

// Options configure the API server.
type Options struct {
	// Addr to listen on, e.g. ":8090".
	Addr string
	// Namespace holds the pools, leases and policies the API serves.
	Namespace string
	// Leases carries out the lease and pool operations the handlers
	// decode and encode (required). Its ProxyEndpoint is ProxyEndpoint's,
	// which reads the Host that the server puts in each request's context.
	Leases *leaseservice.Service
	// Connect serves /connect/<lease>/... (required). Start starts it.
	Connect *connect.Proxy
	Auth    Authenticator
	Log     logr.Logger
	// Version is reported by /v1/status.
	Version string
	// MaxInFlight bounds concurrent requests (429 beyond it); infrastructure
	// routes are exempt.
	MaxInFlight int
	// MaxBodyBytes bounds request bodies (413 beyond it).
	MaxBodyBytes int64
	// BodyReadTimeout bounds reading a request body (400 beyond it;
	// DefaultBodyReadTimeout).
	BodyReadTimeout time.Duration
	// Ready reports whether the process can serve (caches synced).
	Ready func() bool
	// TLSCertFile and TLSKeyFile serve HTTPS when both are set; they are
	// read again when they change (see Start).
	TLSCertFile, TLSKeyFile string
	// ConnectURL is ProxyEndpointOptions.ConnectURL, which Start checks:
	// it must be usable in kubeconfigs, and needs TLS.
	ConnectURL string
	// Login is what GET /.well-known/kunobi-auth publishes (nil: 404).
	Login *wire.LoginDiscovery
	// TrustedProxies are the proxies in front of the API whose
	// X-Forwarded-For names the caller for the per-source limits
	// (clientAddr). Empty: the header is never read, and each connection's
	// peer is its caller.
	TrustedProxies []netip.Prefix
	// MaxImageBytes bounds one image archive of kobe load, as sent and
	// unpacked (DefaultMaxImageBytes when 0); MaxImageLoads bounds the
	// loads served at once (DefaultMaxImageLoads when 0). ImageDir holds
	// the archives while they load (os.TempDir() when empty): up to three
	// times MaxImageBytes for each load.
	MaxImageBytes int64
	MaxImageLoads int
	ImageDir      string
}

// Server is the HTTP API.
type Server struct {
	opts     Options
	leases   *leaseservice.Service
	handler  http.Handler
	inFlight chan struct{}
	// waiting holds the GETs that wait while their lease is Pending
	// (?wait=), which hold no in-flight slot meanwhile.
	waiting chan struct{}
	// readingBodies counts requests reading their body, which hold no
	// in-flight slot (tests observe trickling callers with it).
	readingBodies atomic.Int32
	// imageLoads are the slots of the image loads served at once.
	imageLoads chan struct{}
	listener   net.Listener
	listenerMu sync.Mutex
	connect    *connect.Proxy
}

// New builds the server and its routes. It refuses Options without the
// services that the routes call.
func New(opts Options) (*Server, error) {
	if opts.Leases == nil {
		return nil, errors.New("the API server needs its lease service (Options.Leases)")
	}
	if opts.Connect == nil {
		return nil, errors.New("the API server needs its connect proxy (Options.Connect)")
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.BodyReadTimeout <= 0 {
		opts.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if opts.MaxImageBytes <= 0 {
		opts.MaxImageBytes = DefaultMaxImageBytes
	}
	if opts.MaxImageLoads <= 0 {
		opts.MaxImageLoads = DefaultMaxImageLoads
	}
	if opts.ImageDir == "" {
		opts.ImageDir = os.TempDir()
	}
	if opts.Ready == nil {
		opts.Ready = func() bool { return true }
	}
	s := &Server{opts: opts, leases: opts.Leases, connect: opts.Connect, inFlight: make(chan struct{}, opts.MaxInFlight),
		waiting: make(chan struct{}, opts.MaxInFlight), imageLoads: make(chan struct{}, opts.MaxImageLoads)}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the root handler (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	api := http.NewServeMux()
	for pattern, h := range map[string]http.HandlerFunc{
		"POST /v1/leases":                s.createLease,
		"GET /v1/leases":                 s.listLeases,
		"GET /v1/leases/{id}":            s.getLease,
		"DELETE /v1/leases/{id}":         s.releaseLease,
		"PATCH /v1/leases/{id}":          s.extendLease,
		"POST /v1/leases/{id}/heartbeat": s.heartbeat,
		"GET /v1/pools":                  s.listPools,
		"GET /v1/pools/{name}":           s.getPool,
		"GET /v1/pools/{name}/leases":    s.listPoolLeases,
		"GET /v1/whoami":                 s.whoami,
	} {
		api.Handle(pattern, s.authenticate(false, h))
	}
	api.Handle("GET /v1/status", s.authenticate(true, s.status))
	api.HandleFunc("GET "+wire.LoginDiscoveryPath, s.loginDiscovery)
	// The body is read before a slot is taken: a caller that trickles its
	// body (authenticated or not) holds a connection for at most
	// BodyReadTimeout, never a slot. Authentication, which SSH signatures
	// need the body for, runs inside the slot.
	limited := s.bufferBody(s.limitInFlight(jsonMuxErrors(api)))

	root := http.NewServeMux()
	// /livez is /healthz by the name Kubernetes components use today: 200
	// while the process serves.
	alive := func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok") }
	root.HandleFunc("GET /healthz", alive)
	root.HandleFunc("GET /livez", alive)
	root.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.opts.Ready() {
			writeText(w, http.StatusServiceUnavailable, "caches not synced")
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	// No /metrics here: this port may be exposed, and the metrics name
	// pools the caller may not see. The metrics bind address serves them.
	root.Handle("/", withRequestHost(s.withSource(limited)))
	// kobe load streams its body: neither buffered nor in an in-flight
	// slot, it has slots of its own (loadImages).
	root.Handle("POST /v1/leases/{id}/images", withRequestHost(s.withSource(http.HandlerFunc(s.loadImages))))
	// The connect proxy is routed before the mux, which would clean (and
	// redirect) its paths: it refuses unclean ones itself. It has its own
	// in-flight limit and no body buffering: its streams last as long as
	// the lease. It answers /connect/<lease>/... and the Kubernetes API's
	// paths at the root (/api, /apis, /version, /openapi...: connect.RootPaths,
	// which no route below shares), for clients that drop a kubeconfig
	// server's path; none of them reaches the lease API.
	return recoverPanics(s.opts.Log, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if connect.Serves(r) {
			s.connect.ServeHTTP(w, r)
			return
		}
		root.ServeHTTP(w, r)
	}))
}

// Start serves until ctx ends (manager.Runnable). Over TLS, the certificate
// and key files are watched (and read again every 10 s besides): a renewed
// certificate, such as cert-manager's rotation of the Secret that the
// kubelet then swaps into the pod's volume, is served to new connections
// without a restart.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.ConnectURL != "" {
		if !servesTLS(s.opts.TLSCertFile, s.opts.TLSKeyFile) {
			return errors.New("--connect-url needs the API served over TLS: add --api-tls-cert-file and --api-tls-key-file")
		}
		if _, err := leasecreds.ProxyServer(s.opts.ConnectURL, "lease"); err != nil {
			return fmt.Errorf("--connect-url: %w", err)
		}
	}
	if err := s.connect.Start(ctx); err != nil {
		return err
	}
	var certs *certwatcher.CertWatcher
	if servesTLS(s.opts.TLSCertFile, s.opts.TLSKeyFile) {
		var err error
		if certs, err = certwatcher.New(s.opts.TLSCertFile, s.opts.TLSKeyFile); err != nil {
			return fmt.Errorf("loading the lease API's TLS certificate: %w", err)
		}
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.opts.Addr, err)
	}
	s.listenerMu.Lock()
	s.listener = ln
	s.listenerMu.Unlock()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(serverErrors{log: s.opts.Log}, "", 0),
	}
	// One for the server, one for the certificate watcher.
	errc := make(chan error, 2)
	if certs != nil {
		// Client certificates are requested, not required: lease API
		// callers present none; the connect proxy verifies a lease's
		// certificate itself, against its member's client CA.
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate, ClientAuth: tls.RequestClientCert}
		go func() {
			if err := certs.Start(ctx); err != nil {
				errc <- fmt.Errorf("watching the lease API's TLS certificate: %w", err)
			}
		}()
	}
	go func() {
		if certs != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	s.opts.Log.Info("Serving lease API", "addr", ln.Addr().String(), "namespace", s.opts.Namespace)
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		_ = srv.Close()
		return fmt.Errorf("serving lease API: %w", err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	}
}

// serverErrors logs net/http's own error lines, cut to maxLoggedReason:
// they can echo what a caller sent before any credential is read (a failed
// TLS handshake names the ALPN protocols the client offered, up to 64 KiB
// of them). Failed handshakes, which any caller can cause and the operator
// can do nothing about, are logged at V(1), as kube-apiserver logs them at
// V(5).
type serverErrors struct{ log logr.Logger }

func (e serverErrors) Write(p []byte) (int, error) {
	line := truncate.Log(strings.TrimSuffix(string(p), "\n"), maxLoggedReason)
	if strings.HasPrefix(line, "http: TLS handshake error") {
		e.log.V(1).Info("TLS handshake failed", "error", line)
	} else {
		e.log.Info("HTTP server error", "error", line)
	}
	return len(p), nil
}

// Addr is the address the server listens on once started.
func (s *Server) Addr() string {
	s.listenerMu.Lock()
	defer s.listenerMu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// NeedLeaderElection is false: every replica serves the API.
func (s *Server) NeedLeaderElection() bool { return false }
