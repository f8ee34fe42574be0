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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

// TestEgressTargets is the proxy's destination decision: the member's pods
// (of this node's and verified peers' ranges, not the ranges' own
// addresses), its node pods at the kubelet port, and nothing else.
func TestEgressTargets(t *testing.T) {
	targets := egressTargets{
		podRanges:   []netip.Prefix{netip.MustParsePrefix("198.19.244.0/24"), netip.MustParsePrefix("198.19.245.0/24")},
		nodes:       []netip.Addr{netip.MustParseAddr("10.244.0.7"), netip.MustParseAddr("10.244.0.9")},
		kubeletPort: KubeletPort,
	}
	for _, tt := range []struct {
		dst   string
		allow bool
	}{
		{"198.19.244.5:8080", true},
		{"198.19.245.254:80", true},
		{"198.19.244.2:1", true},
		{"10.244.0.7:10250", true},
		{"10.244.0.9:10250", true},
		{"[::ffff:198.19.244.5]:80", true}, // the same IPv4 address
		// A node pod at any other port: its own sockets (this proxy,
		// kube-proxy's health port), or a hostNetwork pod's.
		{"10.244.0.7:10261", false},
		{"10.244.0.9:22", false},
		// The ranges' own addresses: the VXLAN end, the pod bridge (the
		// node pod's own sockets) and the broadcast address.
		{"198.19.244.0:10250", false},
		{"198.19.244.1:10261", false},
		{"198.19.245.1:10256", false},
		{"198.19.244.255:80", false},
		// The member's other ranges: a node not (yet) a verified peer, the
		// Service range (kube-proxy would send a cluster IP wherever the
		// holder's EndpointSlices say).
		{"198.19.246.5:80", false},
		{"198.19.240.1:443", false},
		{"198.19.240.10:53", false},
		// The host cluster's neighbourhood and everything else.
		{"10.244.0.8:10250", false}, // another member's node pod
		{"10.244.0.8:80", false},
		{"10.96.0.1:443", false}, // the host's kubernetes Service
		{"192.168.1.10:6443", false},
		{"8.8.8.8:53", false},
		{"127.0.0.1:10250", false},
		{"127.0.0.1:8080", false},
		{"0.0.0.0:80", false},
		{"169.254.169.254:80", false},
		{"224.0.0.1:80", false},
		{"255.255.255.255:80", false},
		{"[::1]:80", false},
		{"[fe80::1]:80", false},
		{"[2001:db8::1]:443", false},
		{"198.19.244.5:0", false},
	} {
		t.Run(tt.dst, func(t *testing.T) {
			err := targets.allow(netip.MustParseAddrPort(tt.dst))
			if (err == nil) != tt.allow {
				t.Errorf("allow(%s) = %v, want allowed %v", tt.dst, err, tt.allow)
			}
		})
	}
	if err := (egressTargets{kubeletPort: KubeletPort}).allow(netip.MustParseAddrPort("198.19.244.5:80")); err == nil {
		t.Error("a proxy that knows no range allowed a pod address")
	}
}

func TestLastAddr(t *testing.T) {
	for p, want := range map[string]string{"198.19.244.0/24": "198.19.244.255", "10.0.0.0/8": "10.255.255.255", "198.19.244.0/22": "198.19.247.255", "1.2.3.4/32": "1.2.3.4", "198.19.244.0/23": "198.19.245.255"} {
		if got := lastAddr(netip.MustParsePrefix(p)); got.String() != want {
			t.Errorf("lastAddr(%s) = %s, want %s", p, got, want)
		}
	}
}

// egressPKI is a member's egress CA with the proxy's and the API server's
// certificates, and the certificates of clients that must be refused.
type egressPKI struct {
	serverCA    *x509.CertPool
	server      tls.Certificate
	apiServer   tls.Certificate
	otherCA     tls.Certificate // the API server's name, another CA
	otherName   tls.Certificate // the egress CA, another name
	serverAsCli tls.Certificate // the proxy's own (server) certificate
}

func newEgressPKI(t *testing.T) (*egressPKI, *x509.CertPool) {
	t.Helper()
	ca, err := pki.NewCA("egress-ca", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other-ca", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair := func(cert, key []byte, err error) tls.Certificate {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	now := time.Now()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	p := &egressPKI{
		serverCA:  pool,
		server:    pair(ca.IssueServing("proxy", []string{"egress.test"}, nil, time.Hour)),
		apiServer: pair(ca.IssueClient("kube-apiserver", nil, now.Add(-time.Minute), now.Add(time.Hour))),
		otherCA:   pair(other.IssueClient("kube-apiserver", nil, now.Add(-time.Minute), now.Add(time.Hour))),
		otherName: pair(ca.IssueClient("system:admin", []string{"system:masters"}, now.Add(-time.Minute), now.Add(time.Hour))),
	}
	p.serverAsCli = p.server
	return p, pool
}

// testProxy is an egress proxy on loopback whose "pods" (198.19.244.0/24)
// and "node" (10.244.0.7) are all one echo server on loopback: dial sends
// there and counts; resolve knows "pod.test" and "localhost".
type testProxy struct {
	addr  string
	dials atomic.Int32
	pki   *egressPKI
}

func startTestProxy(t *testing.T, slots int) *testProxy {
	t.Helper()
	certs, pool := newEgressPKI(t)
	echo, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	tp := &testProxy{pki: certs}
	p := &egressProxy{
		log: log.New(io.Discard, "", 0),
		tls: egressServerTLS(certs.server, pool, "kube-apiserver"),
		targets: func() egressTargets {
			return egressTargets{
				podRanges: []netip.Prefix{netip.MustParsePrefix("198.19.244.0/24")},
				nodes:     []netip.Addr{netip.MustParseAddr("10.244.0.7")}, kubeletPort: KubeletPort,
			}
		},
		dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			tp.dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp4", echo.Addr().String())
		},
		resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			switch host {
			case "pod.test":
				return []netip.Addr{netip.MustParseAddr("198.19.244.9")}, nil
			case "localhost":
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, errors.New("no such host")
		},
		slots: make(chan struct{}, slots),
		logs:  rate.NewLimiter(rate.Inf, 1),
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go p.serve(ctx, ln)
	tp.addr = ln.Addr().String()
	return tp
}

// connect opens a tunnel as kube-apiserver's egress selector does (the
// same request), with cert as its client certificate (nil: none).
func (tp *testProxy) connect(cert *tls.Certificate, method, dst string) (net.Conn, *http.Response, error) {
	cfg := &tls.Config{RootCAs: tp.pki.serverCA, ServerName: "egress.test"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp4", tp.addr, cfg)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n\r\n", method, dst, "127.0.0.1")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, res, nil
}

// TestEgressProxy: only the API server's certificate of the member's egress
// CA gets a tunnel, only to an allowed destination (by address, a name's
// too), and a destination is never dialled before it is allowed.
func TestEgressProxy(t *testing.T) {
	tp := startTestProxy(t, 16)
	for _, dst := range []string{"198.19.244.5:8080", "10.244.0.7:10250", "pod.test:80"} {
		t.Run("tunnel to "+dst, func(t *testing.T) {
			c, res, err := tp.connect(&tp.pki.apiServer, http.MethodConnect, dst)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT %s: %s", dst, res.Status)
			}
			if _, err := io.WriteString(c, "ping"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("through the tunnel: %q, %v", buf, err)
			}
		})
	}
	before := tp.dials.Load()
	for _, dst := range []string{
		"127.0.0.1:8080", "localhost:8080", "10.96.0.1:443", "10.244.0.8:10250", "10.244.0.7:22",
		"198.19.240.1:443", "198.19.244.1:10261", "169.254.169.254:80", "[::1]:80", "elsewhere.test:80",
	} {
		t.Run("refused "+dst, func(t *testing.T) {
			c, res, err := tp.connect(&tp.pki.apiServer, http.MethodConnect, dst)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			if res.StatusCode == http.StatusOK {
				t.Fatalf("CONNECT %s: %s", dst, res.Status)
			}
			t.Logf("CONNECT %s: %s", dst, res.Status)
		})
	}
	t.Run("not CONNECT", func(t *testing.T) {
		c, res, err := tp.connect(&tp.pki.apiServer, http.MethodGet, "/")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET: %s", res.Status)
		}
	})
	for name, cert := range map[string]*tls.Certificate{
		"no client certificate":                        nil,
		"the API server's name from another CA":        &tp.pki.otherCA,
		"another name from the egress CA":              &tp.pki.otherName,
		"the proxy's own server certificate as client": &tp.pki.serverAsCli,
	} {
		t.Run(name, func(t *testing.T) {
			c, res, err := tp.connect(cert, http.MethodConnect, "198.19.244.5:8080")
			if err == nil {
				_ = c.Close()
				t.Fatalf("CONNECT answered %s", res.Status)
			}
			t.Logf("refused: %v", err)
		})
	}
	if n := tp.dials.Load() - before; n != 0 {
		t.Errorf("%d connections dialled for refused requests", n)
	}
}

// TestEgressProxyCapsTunnels: a connection beyond the cap is closed, and
// gets through once a tunnel ends.
func TestEgressProxyCapsTunnels(t *testing.T) {
	tp := startTestProxy(t, 2)
	var open []net.Conn
	for range 2 {
		c, res, err := tp.connect(&tp.pki.apiServer, http.MethodConnect, "198.19.244.5:80")
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("tunnel within the cap: %v %v", res, err)
		}
		open = append(open, c)
	}
	if c, res, err := tp.connect(&tp.pki.apiServer, http.MethodConnect, "198.19.244.5:80"); err == nil {
		_ = c.Close()
		t.Fatalf("a third tunnel with a cap of 2: %s", res.Status)
	}
	_ = open[0].Close()
	var once sync.Once
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, res, err := tp.connect(&tp.pki.apiServer, http.MethodConnect, "198.19.244.5:80")
		if err == nil && res.StatusCode == http.StatusOK {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tunnel after one ended: %v", err)
		}
		once.Do(func() { t.Log("waiting for the ended tunnel's slot") })
		time.Sleep(50 * time.Millisecond)
	}
	_ = open[1].Close()
}

func TestEgressProxyReasonIsOneLine(t *testing.T) {
	var b strings.Builder
	reply(&b, http.StatusForbidden, "a\r\nb")
	if first, _, _ := strings.Cut(b.String(), "\r\n"); first != "HTTP/1.1 403 Forbidden: a  b" {
		t.Errorf("status line %q", first)
	}
}
