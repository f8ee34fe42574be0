package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
)

// maxLogPerAnonymousRequest is what one request without valid credentials
// may make the operator write to its log, at any verbosity.
const maxLogPerAnonymousRequest = 4 << 10

// logCounter counts the bytes logged through a logr sink and through Go's
// standard logger, where net/http writes its own errors when the server
// sets no ErrorLog.
type logCounter struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func (c *logCounter) add(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += len(line)
	c.lines = append(c.lines, line)
}

func (c *logCounter) Write(p []byte) (int, error) {
	c.add(string(p))
	return len(p), nil
}

func (c *logCounter) bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// since is what was logged after the first n bytes' lines, each cut for
// a failure message.
func (c *logCounter) since(lines int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.lines[lines:] {
		if len(l) > 300 {
			l = fmt.Sprintf("%s...(%d bytes)", l[:300], len(l))
		}
		out = append(out, l)
	}
	return out
}

func (c *logCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lines)
}

// TestAnonymousRequestsLogLittle: requests without valid credentials, with a
// path, headers, a bearer token, a JWT header, an SSH signature or a TLS
// ClientHello as large as the server lets them be, each make the operator
// write at most maxLogPerAnonymousRequest bytes of log, at Info and at
// every debug level; a request line or headers beyond the server's bound
// are refused with 431 before anything reads them, while an SSH signature
// at its own size limit still fits. Real TLS connections to the server
// that Start serves, the real authenticator (token and OIDC policies).
func TestAnonymousRequestsLogLittle(t *testing.T) {
	for _, verbosity := range []int{0, 10} {
		t.Run(fmt.Sprintf("verbosity %d", verbosity), func(t *testing.T) {
			testAnonymousRequestsLogLittle(t, verbosity)
		})
	}
}

func testAnonymousRequestsLogLittle(t *testing.T, verbosity int) {
	logs := &logCounter{}
	logger := funcr.New(func(prefix, args string) { logs.add(prefix + " " + args) }, funcr.Options{Verbosity: verbosity})
	std := log.Writer()
	log.SetOutput(logs)
	t.Cleanup(func() { log.SetOutput(std) })

	iss := oidcissuer.New(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss.Publish(key, "k1", jose.RS256)
	const ns = "kobe-system"
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ci-token", Namespace: ns}, Data: map[string][]byte{"token": []byte("good-token")}},
		&kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: ns}, Spec: kobev1.AccessPolicySpec{
			Auth:  kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "ci-token"}}},
			Rules: []kobev1.AccessRule{{Pools: []string{"*"}}},
		}},
		&kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "people", Namespace: ns}, Spec: kobev1.AccessPolicySpec{
			Auth:  kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: iss.URL, Audience: []string{"kobe"}}},
			Rules: []kobev1.AccessRule{{Pools: []string{"*"}}},
		}},
	).Build()

	dir := t.TempDir()
	ca, err := pki.NewCA("kobe-api-test-ca", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServing("kobe-api", nil, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writeFileForTest(t, filepath.Join(dir, "tls.crt"), certPEM)
	writeFileForTest(t, filepath.Join(dir, "tls.key"), keyPEM)

	s := newIdleServer(t, Options{
		Addr: "127.0.0.1:0", Namespace: ns, Log: logger,
		TLSCertFile: filepath.Join(dir, "tls.crt"), TLSKeyFile: filepath.Join(dir, "tls.key"),
		Auth: auth.NewAuthenticator(auth.Options{Reader: reader, Namespace: ns, Logger: logger, SSHAudience: "kobe:test"}),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	testenv.Eventually(t, 10*time.Second, "the server to listen", func() error {
		if s.Addr() == "" {
			return errors.New("not listening yet")
		}
		return nil
	})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	tlsConfig := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	base := "https://" + s.Addr()

	const big = 28 << 10 // within maxHeaderBytes with the rest of the request
	junk := strings.Repeat("a", big)
	jwt := func(header string) string {
		enc := base64.RawURLEncoding.EncodeToString
		return enc([]byte(header)) + "." + enc([]byte(`{"iss":"`+iss.URL+`","aud":"kobe"}`)) + ".c2ln"
	}
	for _, tc := range []struct {
		name string
		path string
		// header sets the request's headers.
		header func(h http.Header)
		method string
		want   int
	}{
		{name: "path", path: "/v1/leases/" + junk, want: http.StatusUnauthorized},
		{name: "path past the bound", path: "/v1/leases/" + strings.Repeat(junk, 2), want: http.StatusRequestHeaderFieldsTooLarge},
		{name: "headers", path: "/v1/leases", want: http.StatusUnauthorized, header: func(h http.Header) {
			h.Set("User-Agent", junk[:8<<10])
			for i := range 20 {
				h.Set(fmt.Sprintf("X-Junk-%d", i), junk[:1<<10])
			}
		}},
		{name: "headers past the bound", path: "/v1/leases", want: http.StatusRequestHeaderFieldsTooLarge, header: func(h http.Header) {
			for i := range 40 {
				h.Set(fmt.Sprintf("X-Junk-%d", i), junk[:1<<10])
			}
		}},
		{name: "bearer token", path: "/v1/leases", want: http.StatusUnauthorized, header: func(h http.Header) {
			h.Set("Authorization", "Bearer "+junk)
		}},
		{name: "JWT naming a long algorithm", path: "/v1/leases", want: http.StatusUnauthorized, header: func(h http.Header) {
			h.Set("Authorization", "Bearer "+jwt(`{"alg":"`+junk[:20<<10]+`","kid":"k1"}`))
		}},
		{name: "JWT naming a long key id", path: "/v1/leases", want: http.StatusUnauthorized, header: func(h http.Header) {
			h.Set("Authorization", "Bearer "+jwt(`{"alg":"RS256","kid":"`+junk[:20<<10]+`"}`))
		}},
		{name: "SSH signature at its size limit", path: "/v1/leases", want: http.StatusUnauthorized, header: func(h http.Header) {
			v := "KobeSSH v=2,key=" + junk
			h.Set("Authorization", v[:sshsig.MaxHeaderLen])
		}},
		{name: "SSH signature with a long parameter", path: "/v1/leases", want: http.StatusUnauthorized, header: func(h http.Header) {
			h.Set("Authorization", "KobeSSH v=2,"+junk[:sshsig.MaxHeaderLen-20]+"=1")
		}},
		{name: "status with a bad token", path: "/v1/status", want: http.StatusUnauthorized, header: func(h http.Header) {
			h.Set("Authorization", "Bearer "+junk)
		}},
		{name: "no route", path: "/" + junk, want: http.StatusNotFound},
		{name: "long method", path: "/v1/leases", method: strings.ToUpper(junk[:8<<10]), want: http.StatusMethodNotAllowed},
		{name: "connect path without a certificate", path: "/connect/lease-1/api/" + junk, want: http.StatusUnauthorized},
		{name: "Kubernetes path at the root without a certificate", path: "/api/" + junk, want: http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			req, err := http.NewRequestWithContext(t.Context(), method, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != nil {
				tc.header(req.Header)
			}
			before, lines := logs.bytes(), logs.count()
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("answered %d, want %d", resp.StatusCode, tc.want)
			}
			n := logs.bytes() - before
			if n > maxLogPerAnonymousRequest {
				t.Errorf("%d bytes of log for one request, want at most %d: %q", n, maxLogPerAnonymousRequest, logs.since(lines))
			}
			t.Logf("%d: %d bytes of log", resp.StatusCode, n)
		})
	}

	// A ClientHello offering ~50 KiB of ALPN protocols that the server does
	// not speak: the handshake fails, and Go's error quotes every one.
	t.Run("TLS handshake offering long ALPN protocols", func(t *testing.T) {
		before, lines := logs.bytes(), logs.count()
		offer := tlsConfig.Clone()
		offer.ServerName = "127.0.0.1"
		for i := range 200 {
			offer.NextProtos = append(offer.NextProtos, fmt.Sprintf("%03d%s", i, junk[:250]))
		}
		raw, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = raw.Close() }()
		if err := tls.Client(raw, offer).HandshakeContext(t.Context()); err == nil || !strings.Contains(err.Error(), "no application protocol") {
			t.Fatalf("handshake: %v, want the server's refusal of the protocols offered", err)
		}
		// net/http logs a failed handshake, then closes the connection:
		// once it is closed, whatever was logged for it has been.
		_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, raw); err != nil {
			t.Fatalf("waiting for the server to close the connection: %v", err)
		}
		n := logs.bytes() - before
		if n > maxLogPerAnonymousRequest {
			t.Errorf("%d bytes of log for one handshake, want at most %d: %q", n, maxLogPerAnonymousRequest, logs.since(lines))
		}
		t.Logf("%d bytes of log", n)
	})
	t.Logf("verbosity %d: %d bytes of log in all", verbosity, logs.bytes())
}

func writeFileForTest(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
