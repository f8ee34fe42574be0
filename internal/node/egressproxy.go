package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The egress proxy gives the member's API server, which runs in a pod of the
// host cluster, a way into its member's network (in-cluster backends): the
// API server's egress selector sends everything of its "cluster" egress
// (pods/proxy and services/proxy, kubelets for logs, exec and port-forward,
// admission and conversion webhooks, aggregated APIs) as HTTP CONNECT over
// mutual TLS to the proxy of one of the member's node pods, which connects
// from inside the node pod's network namespace.
//
// Where it connects is decided by the resolved address, never by a name,
// and never from what a lease holder writes: a holder is system:masters of
// the member and can forge pod IPs, Endpoints, EndpointSlices and node
// addresses. The proxy connects only to
//   - a pod address of this node's pod range or of a verified overlay peer's
//     (overlay.go), without the range's first two addresses (the VXLAN end
//     and the pod bridge: the node pod's own sockets) and its last;
//   - this node pod's IP or a verified peer's, at the kubelet's port only.
//
// Nothing else: not the member's Service range (with aggregator routing the
// API server reaches Services at their endpoints; a cluster IP would be
// translated by kube-proxy to whatever EndpointSlice the holder wrote), not
// the host cluster's pods, Services or nodes, other members, loopback or
// link-local addresses. Only a client with a certificate of the member's
// egress CA for client authentication and the API server's name gets a
// tunnel; the CA is the member's own for this channel alone (not its
// cluster or client CA, with which a lease holder can get certificates
// signed), and its key is kept nowhere.
const (
	// EgressProxyPort is the proxy's TCP port on the node pod's IP.
	EgressProxyPort = 10261
	// KubeletPort is the kubelet's port on the node's IP.
	KubeletPort = 10250
	// egressMaxTunnels caps the tunnels one proxy holds at once (idle
	// connections the API server keeps for reuse count as well); a
	// connection beyond it is closed at once.
	egressMaxTunnels = 256
	// egressHandshakeTimeout bounds the TLS handshake and the CONNECT
	// request; egressDialTimeout the connection to the destination.
	egressHandshakeTimeout = 10 * time.Second
	egressDialTimeout      = 10 * time.Second
	// egressMaxRequest bounds the CONNECT request's size.
	egressMaxRequest = 16 << 10
)

// EgressProxy is a node pod's egress proxy (Config.EgressProxy).
type EgressProxy struct {
	// Port is the TCP port the proxy listens on, on the node pod's IP
	// (EgressProxyPort when 0).
	Port int32 `json:"port,omitempty"`
	// CertFile and KeyFile are the proxy's serving certificate, from the
	// egress CA.
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// ClientCAFile is the member's egress CA: a client must present a
	// certificate it signed for client authentication...
	ClientCAFile string `json:"clientCAFile"`
	// ClientName ...whose common name is ClientName (the API server's).
	ClientName string `json:"clientName"`
}

func (e *EgressProxy) validate() error {
	var errs []error
	for what, p := range map[string]string{"certFile": e.CertFile, "keyFile": e.KeyFile, "clientCAFile": e.ClientCAFile} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("egressProxy.%s %q is not an absolute path", what, p))
		}
	}
	if e.ClientName == "" {
		errs = append(errs, errors.New("egressProxy.clientName is empty"))
	}
	if e.Port < 0 || e.Port > 65535 {
		errs = append(errs, fmt.Errorf("egressProxy.port %d is not a port", e.Port))
	}
	return errors.Join(errs...)
}

// egressTargets are the destinations the proxy may connect to: see allow.
type egressTargets struct {
	// podRanges are this node's pod range and its verified peers'.
	podRanges []netip.Prefix
	// nodes are this node pod's IP and its verified peers'.
	nodes []netip.Addr
	// kubeletPort is the one port of nodes that may be reached.
	kubeletPort uint16
}

// allow says why dst may not be reached (nil: it may).
func (t egressTargets) allow(dst netip.AddrPort) error {
	a := dst.Addr().Unmap()
	switch {
	case !a.IsValid() || dst.Port() == 0:
		return errors.New("not an address and port")
	case !a.Is4():
		return fmt.Errorf("%s is not an IPv4 address (the member's pods and nodes have IPv4 addresses only)", a)
	case a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is a loopback, unspecified, multicast, link-local or broadcast address", a)
	}
	for _, n := range t.nodes {
		if a == n {
			if dst.Port() != t.kubeletPort {
				return fmt.Errorf("%s is a node of this member: only its kubelet's port %d may be reached", dst, t.kubeletPort)
			}
			return nil
		}
	}
	for _, p := range t.podRanges {
		if !p.Contains(a) {
			continue
		}
		first := p.Masked().Addr()
		if a == first || a == first.Next() || a == lastAddr(p) {
			return fmt.Errorf("%s is a node's own address in pod range %s, not a pod's", a, p)
		}
		return nil
	}
	return fmt.Errorf("%s is not an address of this member's pods or nodes", a)
}

// lastAddr is the last address of p (its broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	for i := 3; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	return netip.AddrFrom4(b)
}

// egressProxy serves HTTP CONNECT over mutual TLS (egressproxy.go's top).
type egressProxy struct {
	log *log.Logger
	tls *tls.Config
	// targets is read for every request: the overlay's peers grow.
	targets func() egressTargets
	// dial connects to an allowed destination; resolve looks a name up.
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// slots holds one token per open connection (egressMaxTunnels).
	slots chan struct{}
	// logs limits the refusals and failures logged, so that a lease
	// holder's requests cannot flood the node pod's log.
	logs *rate.Limiter
}

// newEgressProxy loads the proxy's certificate and the egress CA of cfg.
func newEgressProxy(cfg *EgressProxy, targets func() egressTargets, l *log.Logger) (*egressProxy, error) {
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the egress proxy's certificate: %w", err)
	}
	caPEM, err := os.ReadFile(cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the egress CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("the egress CA %s holds no certificate", cfg.ClientCAFile)
	}
	d := &net.Dialer{Timeout: egressDialTimeout}
	return &egressProxy{
		log:     l,
		tls:     egressServerTLS(cert, pool, cfg.ClientName),
		targets: targets,
		dial:    d.DialContext,
		resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
		},
		slots: make(chan struct{}, egressMaxTunnels),
		logs:  rate.NewLimiter(rate.Every(time.Second), 20),
	}, nil
}

// egressServerTLS accepts only clients with a certificate of clientCAs for
// client authentication whose common name is clientName.
func egressServerTLS(cert tls.Certificate, clientCAs *x509.CertPool, clientName string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != clientName {
				return errors.New("the client certificate is not the API server's")
			}
			return nil
		},
	}
}

// serve accepts connections on ln until ctx ends.
func (p *egressProxy) serve(ctx context.Context, ln net.Listener) {
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				p.log.Printf("egress proxy: accepting: %v", err)
			}
			return
		}
		select {
		case p.slots <- struct{}{}:
		default:
			p.logf("egress proxy: closed a connection from %s: %d tunnels open", c.RemoteAddr(), egressMaxTunnels)
			_ = c.Close()
			continue
		}
		go func() {
			defer func() { <-p.slots }()
			p.handle(ctx, c)
		}()
	}
}

// logf logs within the proxy's budget (logs).
func (p *egressProxy) logf(format string, args ...any) {
	if p.logs.Allow() {
		p.log.Printf(format, args...)
	}
}

// handle serves one client: the handshake, one CONNECT, then the tunnel.
func (p *egressProxy) handle(ctx context.Context, raw net.Conn) {
	defer func() { _ = raw.Close() }()
	conn := tls.Server(raw, p.tls)
	_ = raw.SetDeadline(time.Now().Add(egressHandshakeTimeout))
	if err := conn.HandshakeContext(ctx); err != nil {
		p.logf("egress proxy: refused a client at %s: %v", raw.RemoteAddr(), err)
		return
	}
	limited := &io.LimitedReader{R: conn, N: egressMaxRequest}
	br := bufio.NewReader(limited)
	req, err := http.ReadRequest(br)
	if err != nil {
		p.logf("egress proxy: reading a request: %v", err)
		return
	}
	if req.Method != http.MethodConnect {
		reply(conn, http.StatusMethodNotAllowed, "only CONNECT")
		return
	}
	dctx, cancel := context.WithTimeout(ctx, egressDialTimeout)
	target, code, err := p.connect(dctx, req.URL.Host)
	cancel()
	if err != nil {
		p.logf("egress proxy: CONNECT %s: %v", req.URL.Host, err)
		reply(conn, code, err.Error())
		return
	}
	defer func() { _ = target.Close() }()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	_ = raw.SetDeadline(time.Time{})
	// What the client sent after its request (nothing, from kube-apiserver)
	// goes first.
	if n := br.Buffered(); n > 0 {
		pending, _ := br.Peek(n)
		if _, err := target.Write(pending); err != nil {
			return
		}
	}
	splice(conn, target)
}

// connect resolves hostport, checks every address it would connect to and
// connects to the first allowed one. On failure it returns the HTTP status
// to answer with.
func (p *egressProxy) connect(ctx context.Context, hostport string) (net.Conn, int, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("destination %q: %w", hostport, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, http.StatusBadRequest, fmt.Errorf("destination %q: not a port", hostport)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = p.resolve(ctx, host); err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("resolving %q: %w", host, err)
	} else if len(addrs) == 0 {
		return nil, http.StatusBadGateway, fmt.Errorf("resolving %q: no address", host)
	}
	targets := p.targets()
	var refused error
	for _, a := range addrs {
		dst := netip.AddrPortFrom(a.Unmap(), uint16(port))
		if err := targets.allow(dst); err != nil {
			refused = err
			continue
		}
		c, err := p.dial(ctx, "tcp4", dst.String())
		if err != nil {
			return nil, http.StatusBadGateway, fmt.Errorf("connecting to %s: %w", dst, err)
		}
		return c, 0, nil
	}
	return nil, http.StatusForbidden, fmt.Errorf("refused: %w", refused)
}

// reply answers a CONNECT that gets no tunnel; the reason (no secret in it)
// is the status line's text, which kube-apiserver passes on.
func reply(w io.Writer, code int, reason string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", code, http.StatusText(code), sanitizeReason(reason))
}

// sanitizeReason keeps a reason on one line.
func sanitizeReason(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	return string(b)
}

// splice copies both ways until both directions are done, passing each
// end's close on as a half-close.
func splice(client *tls.Conn, target net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(target, client)
		if tc, ok := target.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		} else {
			_ = target.Close()
		}
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, target)
		_ = client.CloseWrite()
	}()
	wg.Wait()
}

// startEgressProxy listens on the node pod's IP (before kubelet runs, so
// that no pod of the member can take the port) and serves until ctx ends.
func (a *Agent) startEgressProxy(ctx context.Context) error {
	cfg := a.cfg.EgressProxy
	if cfg == nil {
		return nil
	}
	p, err := newEgressProxy(cfg, a.egressTargets, a.log)
	if err != nil {
		return err
	}
	port := cfg.Port
	if port == 0 {
		port = EgressProxyPort
	}
	addr := net.JoinHostPort(a.nodeIP, strconv.Itoa(int(port)))
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp4", addr)
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	go p.serve(ctx, ln)
	a.log.Printf("egress proxy listening on %s", addr)
	return nil
}

// egressTargets are this node's and its verified overlay peers' pod ranges
// and addresses.
func (a *Agent) egressTargets() egressTargets {
	t := egressTargets{kubeletPort: KubeletPort}
	if ip, err := netip.ParseAddr(a.nodeIP); err == nil {
		t.nodes = append(t.nodes, ip)
	}
	if r, err := netip.ParsePrefix(a.cfg.PodCIDR); err == nil {
		t.podRanges = append(t.podRanges, r.Masked())
	}
	if a.overlay != nil {
		for _, peer := range a.overlay.peerList() {
			t.nodes = append(t.nodes, peer.ip)
			t.podRanges = append(t.podRanges, peer.podCIDR)
		}
	}
	return t
}
