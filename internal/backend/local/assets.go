package local

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

const (
	// certValidity is how long a member's certificates are valid. Members
	// are short-lived; the figure only has to outlast any of them.
	certValidity = 10 * 365 * 24 * time.Hour
	// caValidity outlasts every certificate the CA signs.
	caValidity = certValidity + 24*time.Hour

	// serviceCIDR is each member's (virtual) Service network; serviceIP is
	// the "kubernetes" Service's address in it.
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"

	// saIssuer is the issuer of the member's ServiceAccount tokens.
	saIssuer = "https://kubernetes.default.svc.cluster.local"

	// adminUser is the admin certificate's user; system:masters makes it
	// cluster-admin without any RBAC object.
	adminUser = "kobe-admin"
)

// writeAssets creates a member's certificates and keys: a server CA and the
// API server's serving certificate, a client CA (whose key the operator signs
// lease certificates with) and an admin certificate, and the ServiceAccount
// signing key. The server CA's key is not kept: nothing signs with it again.
// extraIPs (a member's gateway and its "kubernetes" Service IP, with
// nodes) are added to the serving certificate.
func writeAssets(p paths, advertiseHost string, extraIPs ...net.IP) error {
	if err := os.MkdirAll(filepath.Dir(p.pki("x")), 0o700); err != nil {
		return err
	}
	serverCA, err := pki.NewCA("kobe-member-server-ca", caValidity)
	if err != nil {
		return err
	}
	dnsNames := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(serviceIP)}
	ips = append(ips, extraIPs...)
	if ip := net.ParseIP(advertiseHost); ip != nil {
		ips = append(ips, ip)
	} else {
		dnsNames = append(dnsNames, advertiseHost)
	}
	servingCert, servingKey, err := serverCA.IssueServing("kube-apiserver", dnsNames, ips, certValidity)
	if err != nil {
		return err
	}
	clientCA, err := pki.NewCA("kobe-member-client-ca", caValidity)
	if err != nil {
		return err
	}
	now := time.Now()
	adminCertPEM, adminKeyPEM, err := clientCA.IssueClient(adminUser, []string{"system:masters"}, now.Add(-5*time.Minute), now.Add(certValidity))
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating ServiceAccount key: %w", err)
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return fmt.Errorf("encoding ServiceAccount key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return fmt.Errorf("encoding ServiceAccount public key: %w", err)
	}
	files := []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{serverCACert, serverCA.CertPEM, 0o644},
		{apiserverCert, servingCert, 0o644},
		{apiserverKey, servingKey, 0o600},
		{clientCACert, clientCA.CertPEM, 0o644},
		{clientCAKey, clientCA.KeyPEM, 0o600},
		{adminCert, adminCertPEM, 0o644},
		{adminKey, adminKeyPEM, 0o600},
		{serviceAccountKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saDER}), 0o600},
		{serviceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}), 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(p.pki(f.name), f.data, f.perm); err != nil {
			return err
		}
	}
	return nil
}

// componentUsers are the identities the member's own components
// authenticate as, with certificates from the member's client CA. The
// bootstrap RBAC policy grants the system:kube-* users what they need.
var componentUsers = map[string]struct {
	user   string
	groups []string
}{
	compKCM:       {user: "system:kube-controller-manager"},
	compScheduler: {user: "system:kube-scheduler"},
	compKwok:      {user: "kobe-kwok", groups: []string{"system:masters"}},
}

// writeComponentKubeconfig writes the kubeconfig component c uses to reach
// the member's API server on its local port.
func writeComponentKubeconfig(p paths, c, host string, apiPort int) error {
	u, ok := componentUsers[c]
	if !ok {
		return fmt.Errorf("no identity for component %s", c)
	}
	ca, err := loadClientCA(p)
	if err != nil {
		return err
	}
	now := time.Now()
	certPEM, keyPEM, err := ca.IssueClient(u.user, u.groups, now.Add(-5*time.Minute), now.Add(certValidity))
	if err != nil {
		return err
	}
	serverCA, err := os.ReadFile(p.pki(serverCACert))
	if err != nil {
		return err
	}
	kc, err := pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName:   "member",
		Server:        localURL(host, apiPort),
		CAData:        serverCA,
		UserName:      u.user,
		ClientCertPEM: certPEM,
		ClientKeyPEM:  keyPEM,
	})
	if err != nil {
		return err
	}
	return writeFileAtomic(p.kubeconfig(c), kc, 0o600)
}

func loadClientCA(p paths) (*pki.CA, error) {
	certPEM, err := os.ReadFile(p.pki(clientCACert))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(p.pki(clientCAKey))
	if err != nil {
		return nil, err
	}
	return pki.LoadCA(certPEM, keyPEM)
}

// access reads what the operator needs to use the member from its files.
func access(p paths, endpoint string) (*accessFiles, error) {
	var a accessFiles
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{
		{serverCACert, &a.serverCA},
		{clientCACert, &a.clientCACert},
		{clientCAKey, &a.clientCAKey},
		{adminCert, &a.adminCert},
		{adminKey, &a.adminKey},
	} {
		data, err := os.ReadFile(p.pki(f.name))
		if err != nil {
			return nil, err
		}
		*f.dst = data
	}
	kc, err := pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName:   "kobe-member",
		Server:        endpoint,
		CAData:        a.serverCA,
		UserName:      adminUser,
		ClientCertPEM: a.adminCert,
		ClientKeyPEM:  a.adminKey,
	})
	if err != nil {
		return nil, err
	}
	a.adminKubeconfig = kc
	return &a, nil
}

type accessFiles struct {
	serverCA, clientCACert, clientCAKey, adminCert, adminKey, adminKubeconfig []byte
}

// localURL is the API server URL the member's own components use: host
// is state.LocalHost (empty means 127.0.0.1).
func localURL(host string, port int) string {
	if host == "" {
		host = "127.0.0.1"
	}
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(port))}).String()
}

// endpointURL is the API server URL handed to lease holders.
func endpointURL(host string, port int) string {
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(port))}).String()
}
