package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func mustCA(t testing.TB, cn string) *CA {
	t.Helper()
	ca, err := NewCA(cn, 24*time.Hour)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func parseCert(t testing.TB, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a certificate PEM: %q", certPEM)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parsing certificate: %v", err)
	}
	return c
}

func TestNewCA(t *testing.T) {
	tests := []struct {
		name     string
		cn       string
		validity time.Duration
		wantErr  string
	}{
		{name: "ok", cn: "member-ca", validity: time.Hour},
		{name: "empty common name", cn: "", validity: time.Hour, wantErr: "common name is empty"},
		{name: "zero validity", cn: "x", validity: 0, wantErr: "not positive"},
		{name: "negative validity", cn: "x", validity: -time.Hour, wantErr: "not positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca, err := NewCA(tt.cn, tt.validity)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewCA error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewCA: %v", err)
			}
			if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != tt.cn {
				t.Errorf("cert IsCA=%v CN=%q, want CA with CN %q", ca.Cert.IsCA, ca.Cert.Subject.CommonName, tt.cn)
			}
			if _, ok := ca.Key.Public().(*ecdsa.PublicKey); !ok {
				t.Errorf("key is %T, want ECDSA", ca.Key.Public())
			}
			if got := time.Until(ca.Cert.NotAfter); got > tt.validity || got < tt.validity-time.Minute {
				t.Errorf("CA expires in %s, want about %s", got, tt.validity)
			}
			if ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
				t.Errorf("CA key usage %v lacks CertSign", ca.Cert.KeyUsage)
			}
			if !strings.Contains(string(ca.KeyPEM), "BEGIN PRIVATE KEY") {
				t.Errorf("KeyPEM is not PKCS #8 PEM")
			}
			if got := parseCert(t, ca.CertPEM); !got.Equal(ca.Cert) {
				t.Errorf("CertPEM does not encode Cert")
			}
		})
	}
}

func TestLoadCA(t *testing.T) {
	ca := mustCA(t, "a")
	other := mustCA(t, "b")
	leafCert, leafKey, err := ca.IssueClient("leaf", nil, time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sec1DER, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	sec1PEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1DER})

	tests := []struct {
		name     string
		cert     []byte
		key      []byte
		wantErr  string
		wantSame *CA
	}{
		{name: "round trip", cert: ca.CertPEM, key: ca.KeyPEM, wantSame: ca},
		{name: "key of another CA", cert: ca.CertPEM, key: other.KeyPEM, wantErr: "does not match"},
		{name: "SEC 1 key that does not match", cert: ca.CertPEM, key: sec1PEM, wantErr: "does not match"},
		{name: "leaf is not a CA", cert: leafCert, key: leafKey, wantErr: "not a CA"},
		{name: "garbage certificate", cert: []byte("nope"), key: ca.KeyPEM, wantErr: "parsing certificate"},
		{name: "garbage key", cert: ca.CertPEM, key: []byte("nope"), wantErr: "parsing private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadCA(tt.cert, tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadCA error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadCA: %v", err)
			}
			if !got.Cert.Equal(tt.wantSame.Cert) {
				t.Errorf("loaded certificate differs")
			}
			// The loaded CA must sign certificates that verify against the original.
			c, _, err := got.IssueClient("u", nil, time.Now(), time.Now().Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AddCert(tt.wantSame.Cert)
			if _, err := parseCert(t, c).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("certificate from loaded CA does not verify: %v", err)
			}
		})
	}
}

func TestIssueServing(t *testing.T) {
	ca := mustCA(t, "server-ca")
	tests := []struct {
		name     string
		dnsNames []string
		ips      []net.IP
		validity time.Duration
		verify   []string // host names that must verify
		reject   []string // host names that must not
		wantErr  string
	}{
		{
			name:     "loopback and names",
			dnsNames: []string{"localhost", "kubernetes.default.svc"},
			ips:      []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
			validity: time.Hour,
			verify:   []string{"localhost", "kubernetes.default.svc", "127.0.0.1", "::1"},
			reject:   []string{"example.com", "10.0.0.1"},
		},
		{name: "ip only", ips: []net.IP{net.ParseIP("192.0.2.7")}, validity: time.Hour, verify: []string{"192.0.2.7"}, reject: []string{"localhost"}},
		{name: "no names", validity: time.Hour, wantErr: "no DNS names"},
		{name: "zero validity", dnsNames: []string{"a"}, wantErr: "not positive"},
		{name: "beyond CA expiry", dnsNames: []string{"a"}, validity: 48 * time.Hour, wantErr: "past the CA's expiry"},
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.IssueServing("apiserver", tt.dnsNames, tt.ips, tt.validity)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("IssueServing error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("IssueServing: %v", err)
			}
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				t.Fatalf("certificate and key do not pair: %v", err)
			}
			c := parseCert(t, certPEM)
			for _, h := range tt.verify {
				if _, err := c.Verify(x509.VerifyOptions{DNSName: h, Roots: roots}); err != nil {
					t.Errorf("verify for %s: %v", h, err)
				}
			}
			for _, h := range tt.reject {
				if _, err := c.Verify(x509.VerifyOptions{DNSName: h, Roots: roots}); err == nil {
					t.Errorf("verify for %s succeeded, want failure", h)
				}
			}
		})
	}
}

func TestIssueClient(t *testing.T) {
	ca := mustCA(t, "client-ca")
	now := time.Now()
	tests := []struct {
		name      string
		cn        string
		orgs      []string
		notBefore time.Time
		notAfter  time.Time
		wantErr   string
	}{
		{name: "admin", cn: "kobe-admin", orgs: []string{"system:masters"}, notBefore: now.Add(-time.Minute), notAfter: now.Add(time.Hour)},
		{name: "lease user with groups", cn: "lease:ns/l1", orgs: []string{"kobe:leases", "team-a"}, notBefore: now, notAfter: now.Add(90 * time.Minute)},
		{name: "no groups", cn: "u", notBefore: now, notAfter: now.Add(time.Minute)},
		{name: "empty name", cn: "", notBefore: now, notAfter: now.Add(time.Hour), wantErr: "common name is empty"},
		{name: "inverted window", cn: "u", notBefore: now, notAfter: now.Add(-time.Second), wantErr: "is not after"},
		{name: "beyond CA expiry", cn: "u", notBefore: now, notAfter: now.Add(25 * time.Hour), wantErr: "past the CA's expiry"},
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.IssueClient(tt.cn, tt.orgs, tt.notBefore, tt.notAfter)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("IssueClient error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("IssueClient: %v", err)
			}
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				t.Fatalf("certificate and key do not pair: %v", err)
			}
			c := parseCert(t, certPEM)
			// DER encodes the organizations as a SET, so their order is not kept
			// (nor needed: Kubernetes groups are a set).
			if c.Subject.CommonName != tt.cn || fmt.Sprint(sorted(c.Subject.Organization)) != fmt.Sprint(sorted(tt.orgs)) {
				t.Errorf("subject CN=%q O=%v, want CN=%q O=%v", c.Subject.CommonName, c.Subject.Organization, tt.cn, tt.orgs)
			}
			// X.509 times have one-second precision: NotAfter is the
			// requested instant truncated to the second.
			if want := tt.notAfter.Truncate(time.Second); !c.NotAfter.Equal(want) {
				t.Errorf("NotAfter = %s, want %s", c.NotAfter, want)
			}
			if want := tt.notBefore.Truncate(time.Second); !c.NotBefore.Equal(want) {
				t.Errorf("NotBefore = %s, want %s", c.NotBefore, want)
			}
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
				t.Errorf("serial %s is not a positive 128-bit number", c.SerialNumber)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: tt.notBefore.Add(time.Second)}); err != nil {
				t.Errorf("client certificate does not verify for client auth: %v", err)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CurrentTime: tt.notBefore.Add(time.Second)}); err == nil {
				t.Errorf("client certificate verifies for server auth, want it refused")
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestIssueClientSerialsDiffer(t *testing.T) {
	ca := mustCA(t, "client-ca")
	seen := map[string]bool{}
	for range 50 {
		c, _, err := ca.IssueClient("u", nil, time.Now(), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		s := parseCert(t, c).SerialNumber.String()
		if seen[s] {
			t.Fatalf("serial %s issued twice", s)
		}
		seen[s] = true
	}
}

func TestKubeconfig(t *testing.T) {
	ca := mustCA(t, "ca")
	cert, key, err := ca.IssueClient("admin", []string{"system:masters"}, time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		in       KubeconfigInput
		wantUser string
		wantErr  string
	}{
		{
			name:     "client certificate",
			in:       KubeconfigInput{ClusterName: "m1", Server: "https://127.0.0.1:6443", CAData: ca.CertPEM, UserName: "admin", ClientCertPEM: cert, ClientKeyPEM: key},
			wantUser: "admin",
		},
		{
			name:     "token, user defaults to cluster name",
			in:       KubeconfigInput{ClusterName: "m2", Server: "https://h:1", CAData: ca.CertPEM, Token: "abc"},
			wantUser: "m2",
		},
		{name: "no cluster name", in: KubeconfigInput{Server: "https://h", Token: "t"}, wantErr: "cluster name is empty"},
		{name: "no server", in: KubeconfigInput{ClusterName: "c", Token: "t"}, wantErr: "server is empty"},
		{name: "no credential", in: KubeconfigInput{ClusterName: "c", Server: "https://h"}, wantErr: "no credential"},
		{name: "cert without key", in: KubeconfigInput{ClusterName: "c", Server: "https://h", ClientCertPEM: cert}, wantErr: "given together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Kubeconfig(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Kubeconfig error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Kubeconfig: %v", err)
			}
			cfg, err := clientcmd.Load(out)
			if err != nil {
				t.Fatalf("clientcmd.Load: %v", err)
			}
			if cfg.CurrentContext != tt.in.ClusterName {
				t.Errorf("current context %q, want %q", cfg.CurrentContext, tt.in.ClusterName)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if ctx == nil || ctx.Cluster != tt.in.ClusterName || ctx.AuthInfo != tt.wantUser {
				t.Fatalf("context %+v, want cluster %q user %q", ctx, tt.in.ClusterName, tt.wantUser)
			}
			cl := cfg.Clusters[tt.in.ClusterName]
			if cl.Server != tt.in.Server || string(cl.CertificateAuthorityData) != string(tt.in.CAData) {
				t.Errorf("cluster server %q / CA data mismatch", cl.Server)
			}
			u := cfg.AuthInfos[tt.wantUser]
			if string(u.ClientCertificateData) != string(tt.in.ClientCertPEM) || string(u.ClientKeyData) != string(tt.in.ClientKeyPEM) || u.Token != tt.in.Token {
				t.Errorf("user credentials do not round-trip")
			}
		})
	}
}

// TestMutualTLS wires everything together: a server with a certificate from
// IssueServing that requires client certificates from another CA, reached
// through a kubeconfig built by Kubeconfig with a certificate from IssueClient.
func TestMutualTLS(t *testing.T) {
	serverCA := mustCA(t, "server-ca")
	clientCA := mustCA(t, "client-ca")
	sCert, sKey, err := serverCA.IssueServing("apiserver", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(sCert, sKey)
	if err != nil {
		t.Fatal(err)
	}
	clientPool := x509.NewCertPool()
	clientPool.AddCert(clientCA.Cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.TLS.PeerCertificates[0]
		fmt.Fprintf(w, "%s %s", c.Subject.CommonName, strings.Join(c.Subject.Organization, ","))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below are expected
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: clientPool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	get := func(certPEM, keyPEM []byte) (string, error) {
		kc, err := Kubeconfig(KubeconfigInput{ClusterName: "m", Server: srv.URL, CAData: serverCA.CertPEM, UserName: "u", ClientCertPEM: certPEM, ClientKeyPEM: keyPEM})
		if err != nil {
			return "", err
		}
		rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			return "", err
		}
		hc, err := rest.HTTPClientFor(rc)
		if err != nil {
			return "", err
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
		if err != nil {
			return "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	cCert, cKey, err := clientCA.IssueClient("lease-user", []string{"system:masters"}, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got, err := get(cCert, cKey)
	if err != nil {
		t.Fatalf("request with a client certificate from the client CA: %v", err)
	}
	if want := "lease-user system:masters"; got != want {
		t.Errorf("server saw %q, want %q", got, want)
	}

	// A certificate from the server CA is not accepted as a client certificate.
	wrongCert, wrongKey, err := serverCA.IssueClient("intruder", nil, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(wrongCert, wrongKey); err == nil {
		t.Errorf("request with a certificate from another CA succeeded, want a TLS failure")
	}
	// An expired certificate is not accepted.
	oldCert, oldKey, err := clientCA.IssueClient("late", nil, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(oldCert, oldKey); err == nil {
		t.Errorf("request with an expired certificate succeeded, want a TLS failure")
	}
}

func BenchmarkIssueClient(b *testing.B) {
	ca := mustCA(b, "client-ca")
	notBefore := time.Now()
	notAfter := notBefore.Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ca.IssueClient("lease:ns/name", []string{"kobe:leases"}, notBefore, notAfter); err != nil {
			b.Fatal(err)
		}
	}
}
