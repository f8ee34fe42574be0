package membercerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(certPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("not a certificate PEM: %q", certPEM)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ips(s ...string) []net.IP {
	out := make([]net.IP, len(s))
	for i, a := range s {
		out[i] = net.ParseIP(a)
	}
	return out
}

func ipStrings(in []net.IP) []string {
	out := make([]string, len(in))
	for i, ip := range in {
		out[i] = ip.String()
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// checkLifetime: a certificate starts a little before now (backdate, or
// pki's own clock skew for CAs and serving certificates) and lasts about
// want from now.
func checkLifetime(t *testing.T, what string, c *x509.Certificate, want time.Duration) {
	t.Helper()
	if start := time.Since(c.NotBefore); start < 4*time.Minute || start > 6*time.Minute {
		t.Errorf("%s starts %s ago, want about 5m", what, start)
	}
	if left := time.Until(c.NotAfter); left > want || left < want-time.Minute {
		t.Errorf("%s ends in %s, want about %s", what, left, want)
	}
	if k, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("%s key is %T, want ECDSA P-256", what, c.PublicKey)
	}
}

// TestNew: the serving certificate's SANs are the in-member names,
// loopback, the Service IP and what the backend adds; the CAs and the admin
// certificate are named and timed as every backend's members always were.
func TestNew(t *testing.T) {
	inMember := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	tests := []struct {
		name    string
		req     Request
		wantDNS []string
		wantIPs []string
		wantErr string
	}{
		{
			name:    "local member advertised by name",
			req:     Request{ServiceIP: net.ParseIP("10.0.0.1"), DNSNames: []string{"kobe.example.com"}},
			wantDNS: append(slices.Clone(inMember), "kobe.example.com"),
			wantIPs: []string{"127.0.0.1", "::1", "10.0.0.1"},
		},
		{
			name:    "local member with nodes, advertised by address",
			req:     Request{ServiceIP: net.ParseIP("10.0.0.1"), IPs: ips("198.18.0.1", "192.0.2.10")},
			wantDNS: inMember,
			wantIPs: []string{"127.0.0.1", "::1", "10.0.0.1", "198.18.0.1", "192.0.2.10"},
		},
		{
			name: "in-cluster member behind its Service",
			req: Request{
				ServiceIP: net.ParseIP("198.19.240.1"), IPs: ips("10.96.0.42"),
				DNSNames: []string{"kobe-m", "kobe-m.ns", "kobe-m.ns.svc", "kobe-m.ns.svc.cluster.local"},
			},
			wantDNS: append(slices.Clone(inMember), "kobe-m", "kobe-m.ns", "kobe-m.ns.svc", "kobe-m.ns.svc.cluster.local"),
			wantIPs: []string{"127.0.0.1", "::1", "198.19.240.1", "10.96.0.42"},
		},
		{name: "no Service IP", req: Request{IPs: ips("10.96.0.42")}, wantErr: "no Service IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := New(tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, ca := range []struct {
				ca   *pki.CA
				name string
			}{{set.ServerCA, ServerCAName}, {set.ClientCA, ClientCAName}} {
				if ca.ca.Cert.Subject.CommonName != ca.name || !ca.ca.Cert.IsCA {
					t.Errorf("CA %q, want a CA named %q", ca.ca.Cert.Subject.CommonName, ca.name)
				}
				checkLifetime(t, ca.name, ca.ca.Cert, CAValidity)
			}

			serving := parseCert(t, set.ServingCert)
			if serving.Subject.CommonName != "kube-apiserver" {
				t.Errorf("serving certificate CN %q", serving.Subject.CommonName)
			}
			if got, want := sorted(serving.DNSNames), sorted(tt.wantDNS); !slices.Equal(got, want) {
				t.Errorf("serving DNS names %v, want %v", got, want)
			}
			if got, want := ipStrings(serving.IPAddresses), ipStrings(ips(tt.wantIPs...)); !slices.Equal(got, want) {
				t.Errorf("serving IPs %v, want %v", got, want)
			}
			checkLifetime(t, "serving certificate", serving, CertValidity)
			if _, err := tls.X509KeyPair(set.ServingCert, set.ServingKey); err != nil {
				t.Errorf("serving certificate and key: %v", err)
			}
			roots := x509.NewCertPool()
			roots.AddCert(set.ServerCA.Cert)
			for _, h := range append(slices.Clone(tt.wantDNS), tt.wantIPs...) {
				if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err != nil {
					t.Errorf("serving certificate for %s: %v", h, err)
				}
			}

			admin := parseCert(t, set.AdminCert)
			if admin.Subject.CommonName != AdminUser || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
				t.Errorf("admin certificate %s %v", admin.Subject.CommonName, admin.Subject.Organization)
			}
			checkLifetime(t, "admin certificate", admin, CertValidity)
			clientRoots := x509.NewCertPool()
			clientRoots.AddCert(set.ClientCA.Cert)
			if _, err := admin.Verify(x509.VerifyOptions{Roots: clientRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("admin certificate: %v", err)
			}
			if _, err := admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
				t.Error("admin certificate verifies against the server CA")
			}
			checkSAKeys(t, set.SAKey, set.SAPub)
		})
	}
}

// TestIdentities: each identity's certificate and kubeconfig carry its
// user and groups, from the client CA, for the cluster and server given.
func TestIdentities(t *testing.T) {
	set, err := New(Request{ServiceIP: net.ParseIP("10.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(set.ClientCA.Cert)
	tests := []struct {
		id         Identity
		wantUser   string
		wantGroups []string
	}{
		{Admin, "kobe-admin", []string{"system:masters"}},
		{ControllerManager, "system:kube-controller-manager", nil},
		{Scheduler, "system:kube-scheduler", nil},
		{KubeletClient, "kube-apiserver-kubelet-client", []string{"system:masters"}},
		{KubeProxy, "system:kube-proxy", nil},
		{EtcdClient, "kube-apiserver-etcd-client", nil},
		{Kubelet("node-1"), "system:node:node-1", []string{"system:nodes"}},
	}
	for _, tt := range tests {
		t.Run(tt.wantUser, func(t *testing.T) {
			kc, err := Kubeconfig(set.ClientCA, set.ServerCA.CertPEM, "member", "https://127.0.0.1:6443", tt.id)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(kc)
			if err != nil {
				t.Fatal(err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if ctx == nil || ctx.Cluster != "member" || ctx.AuthInfo != tt.wantUser {
				t.Fatalf("context %+v, want cluster member and user %s", ctx, tt.wantUser)
			}
			if cl := cfg.Clusters["member"]; cl.Server != "https://127.0.0.1:6443" || string(cl.CertificateAuthorityData) != string(set.ServerCA.CertPEM) {
				t.Errorf("cluster %s does not trust the server CA", cl.Server)
			}
			c := parseCert(t, cfg.AuthInfos[tt.wantUser].ClientCertificateData)
			if c.Subject.CommonName != tt.wantUser || !slices.Equal(c.Subject.Organization, tt.wantGroups) {
				t.Errorf("certificate %s %v, want %s %v", c.Subject.CommonName, c.Subject.Organization, tt.wantUser, tt.wantGroups)
			}
			checkLifetime(t, tt.wantUser, c, CertValidity)
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("certificate of %s: %v", tt.wantUser, err)
			}
		})
	}

	kc, err := AdminKubeconfig(set.ServerCA.CertPEM, set.AdminCert, set.AdminKey, "kobe-member", "https://192.0.2.1:443")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.AuthInfos[AdminUser]; u == nil || string(u.ClientCertificateData) != string(set.AdminCert) || cfg.Clusters["kobe-member"].Server != "https://192.0.2.1:443" {
		t.Errorf("admin kubeconfig does not carry the admin certificate for the server given")
	}
}

func TestNodeServing(t *testing.T) {
	ca, err := pki.NewCA(ClientCAName, CAValidity)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ips     []net.IP
		wantIPs []string
	}{
		{name: "kobe-m-node-0", wantIPs: []string{}},
		{name: "node-1", ips: ips("198.18.0.3"), wantIPs: []string{"198.18.0.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, _, err := NodeServing(ca, tt.name, tt.ips)
			if err != nil {
				t.Fatal(err)
			}
			c := parseCert(t, certPEM)
			if c.Subject.CommonName != tt.name || !slices.Equal(c.DNSNames, []string{tt.name}) || !slices.Equal(ipStrings(c.IPAddresses), tt.wantIPs) {
				t.Errorf("certificate %s %v %v", c.Subject.CommonName, c.DNSNames, c.IPAddresses)
			}
			if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
				t.Errorf("usages %v, want server auth", c.ExtKeyUsage)
			}
			checkLifetime(t, "kubelet serving certificate", c, CertValidity)
		})
	}
}

func TestNewEtcd(t *testing.T) {
	e, err := NewEtcd()
	if err != nil {
		t.Fatal(err)
	}
	if e.CA.Cert.Subject.CommonName != EtcdCAName {
		t.Errorf("etcd CA %q", e.CA.Cert.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(e.CA.Cert)
	srv := parseCert(t, e.ServerCert)
	for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err != nil {
			t.Errorf("etcd serving certificate for %s: %v", h, err)
		}
	}
	cli := parseCert(t, e.ClientCert)
	if cli.Subject.CommonName != EtcdClient.User {
		t.Errorf("etcd client %q", cli.Subject.CommonName)
	}
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("etcd client certificate: %v", err)
	}
	checkLifetime(t, "etcd client certificate", cli, CertValidity)
}

// checkSAKeys: the ServiceAccount key is PKCS #8 ECDSA P-256 and pub is
// its public half.
func checkSAKeys(t *testing.T, keyPEM, pubPEM []byte) {
	t.Helper()
	kb, _ := pem.Decode(keyPEM)
	pb, _ := pem.Decode(pubPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" || pb == nil || pb.Type != "PUBLIC KEY" {
		t.Fatalf("ServiceAccount key PEM types wrong")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() || !ek.PublicKey.Equal(pub) {
		t.Errorf("ServiceAccount key %T does not pair with its public key", k)
	}
}
