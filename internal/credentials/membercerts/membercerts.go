// Package membercerts is a member's certificate set, composed once for every
// backend: the server CA and the API server's serving certificate, the
// client CA and the identities its certificates carry (the admin, the
// control-plane components, kubelets, kube-proxy), the etcd CA and the
// ServiceAccount key pair, with their names, SANs and lifetimes. Backends
// decide only where the set is kept (files, a Secret); the x509 work is
// package pki's. It must not import a backend.
package membercerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

const (
	// CertValidity is how long a member's certificates are valid. Members
	// are short-lived; the figure only has to outlast any of them.
	CertValidity = 10 * 365 * 24 * time.Hour
	// CAValidity outlasts every certificate the member's CAs sign.
	CAValidity = CertValidity + 24*time.Hour
	// backdate is how long before now a client certificate starts, so that
	// a peer whose clock lags a little accepts it.
	backdate = 5 * time.Minute

	// The common names of a member's CAs.
	ServerCAName = "kobe-member-server-ca"
	ClientCAName = "kobe-member-client-ca"
	EtcdCAName   = "kobe-member-etcd-ca"

	// AdminUser is the admin certificate's user; system:masters makes it
	// cluster-admin without any RBAC object.
	AdminUser = "kobe-admin"
	// servingName is the API server's serving certificate's common name.
	servingName = "kube-apiserver"
)

// Identity is a user that a certificate from the member's client CA
// authenticates: Kubernetes reads the user from the common name and the
// groups from the organizations.
type Identity struct {
	User   string
	Groups []string
}

// The identities of a member's own components and of the operator. The API
// server's bootstrap RBAC policy grants the system:kube-* users what they
// need; system:masters needs no RBAC object.
var (
	Admin             = Identity{User: AdminUser, Groups: []string{"system:masters"}}
	ControllerManager = Identity{User: "system:kube-controller-manager"}
	Scheduler         = Identity{User: "system:kube-scheduler"}
	// KubeletClient is the API server's identity towards kubelets (logs,
	// exec, port-forward).
	KubeletClient = Identity{User: "kube-apiserver-kubelet-client", Groups: []string{"system:masters"}}
	// KubeProxy is bound to system:node-proxier by the default RBAC.
	KubeProxy = Identity{User: "system:kube-proxy"}
	// EtcdClient is the API server's identity towards etcd (the etcd CA's).
	EtcdClient = Identity{User: "kube-apiserver-etcd-client"}
)

// Kubelet is node's kubelet: the Node authorizer and NodeRestriction hold
// system:node:<name> to its own node.
func Kubelet(node string) Identity {
	return Identity{User: "system:node:" + node, Groups: []string{"system:nodes"}}
}

// inMemberDNSNames are the names the API server answers to inside the
// member: localhost and its "kubernetes" Service.
var inMemberDNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// Request says where a member's API server is reached.
type Request struct {
	// ServiceIP is the "kubernetes" Service address inside the member.
	ServiceIP net.IP
	// DNSNames and IPs are where it is reached from outside the member;
	// they are added to the in-member names, loopback and ServiceIP.
	DNSNames []string
	IPs      []net.IP
}

// Authorities are what every member has, whether it serves or not (a
// simulated member serves nothing): the server CA that lease kubeconfigs
// trust, the client CA whose key signs lease credentials, and the admin's
// certificate from it. Everything is PEM.
type Authorities struct {
	ServerCA            *pki.CA
	ClientCA            *pki.CA
	AdminCert, AdminKey []byte
}

// NewAuthorities makes a member's Authorities.
func NewAuthorities() (*Authorities, error) {
	serverCA, err := pki.NewCA(ServerCAName, CAValidity)
	if err != nil {
		return nil, err
	}
	clientCA, err := pki.NewCA(ClientCAName, CAValidity)
	if err != nil {
		return nil, err
	}
	adminCert, adminKey, err := Client(clientCA, Admin)
	if err != nil {
		return nil, err
	}
	return &Authorities{ServerCA: serverCA, ClientCA: clientCA, AdminCert: adminCert, AdminKey: adminKey}, nil
}

// Set is what every member that serves has from its start: its
// Authorities, the API server's serving certificate and the ServiceAccount
// key pair. Everything is PEM.
type Set struct {
	Authorities
	ServingCert, ServingKey []byte
	// SAKey signs the member's ServiceAccount tokens; SAPub verifies them.
	SAKey, SAPub []byte
}

// New makes a member's Set for r.
func New(r Request) (*Set, error) {
	if r.ServiceIP == nil {
		return nil, errors.New("making a member's certificates: no Service IP")
	}
	a, err := NewAuthorities()
	if err != nil {
		return nil, err
	}
	dnsNames := append(append([]string{}, inMemberDNSNames...), r.DNSNames...)
	ips := append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, r.ServiceIP}, r.IPs...)
	servingCert, servingKey, err := a.ServerCA.IssueServing(servingName, dnsNames, ips, CertValidity)
	if err != nil {
		return nil, err
	}
	saKey, saPub, err := ServiceAccountKeys()
	if err != nil {
		return nil, err
	}
	return &Set{Authorities: *a, ServingCert: servingCert, ServingKey: servingKey, SAKey: saKey, SAPub: saPub}, nil
}

// Client issues id's certificate from ca, valid from a little before now
// for CertValidity.
func Client(ca *pki.CA, id Identity) (certPEM, keyPEM []byte, err error) {
	now := time.Now()
	return ca.IssueClient(id.User, id.Groups, now.Add(-backdate), now.Add(CertValidity))
}

// Kubeconfig issues id's certificate from clientCA and returns a kubeconfig
// for it, naming cluster, at server, trusting serverCA (PEM).
func Kubeconfig(clientCA *pki.CA, serverCA []byte, cluster, server string, id Identity) ([]byte, error) {
	cert, key, err := Client(clientCA, id)
	if err != nil {
		return nil, err
	}
	return pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName: cluster, Server: server, CAData: serverCA,
		UserName: id.User, ClientCertPEM: cert, ClientKeyPEM: key,
	})
}

// AdminKubeconfig is the admin's kubeconfig with the admin certificate
// already issued (Set.AdminCert and AdminKey).
func AdminKubeconfig(serverCA, adminCert, adminKey []byte, cluster, server string) ([]byte, error) {
	return pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName: cluster, Server: server, CAData: serverCA,
		UserName: AdminUser, ClientCertPEM: adminCert, ClientKeyPEM: adminKey,
	})
}

// NodeServing issues node's kubelet serving certificate from ca, for its
// name and ips. ca is the backend's choice: the one its API server verifies
// kubelets with (--kubelet-certificate-authority), if it does.
func NodeServing(ca *pki.CA, node string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return ca.IssueServing(node, []string{node}, ips, CertValidity)
}

// Etcd is a member's etcd PKI, for members that run their own etcd with
// TLS: its CA, etcd's serving certificate on loopback and the API
// server's client certificate.
type Etcd struct {
	CA                    *pki.CA
	ServerCert, ServerKey []byte
	ClientCert, ClientKey []byte
}

// NewEtcd makes a member's etcd PKI.
func NewEtcd() (*Etcd, error) {
	ca, err := pki.NewCA(EtcdCAName, CAValidity)
	if err != nil {
		return nil, err
	}
	srvCert, srvKey, err := ca.IssueServing("etcd", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, CertValidity)
	if err != nil {
		return nil, err
	}
	cliCert, cliKey, err := Client(ca, EtcdClient)
	if err != nil {
		return nil, err
	}
	return &Etcd{CA: ca, ServerCert: srvCert, ServerKey: srvKey, ClientCert: cliCert, ClientKey: cliKey}, nil
}

// ServiceAccountKeys makes the ECDSA P-256 key pair that signs (PKCS #8
// "PRIVATE KEY") and verifies (PKIX "PUBLIC KEY") a member's
// ServiceAccount tokens.
func ServiceAccountKeys() (keyPEM, pubPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating ServiceAccount key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding ServiceAccount key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encoding ServiceAccount public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// EgressCAName is the common name of a member's egress CA; EgressClientName
// that of the API server's certificate for its egress proxies, the one
// client they accept.
const (
	EgressCAName     = "kobe-member-egress-ca"
	EgressClientName = "kube-apiserver-egress"
)

// Egress is the PKI of the channel between a member's API server and the
// egress proxies of its node pods (in-cluster backends): a CA of its own,
// the API server's client certificate and one serving certificate per
// proxy for serverName. The CA's key is not kept: nothing is issued later,
// so nothing can be issued by anyone else either. It is not the member's
// server or client CA, with which a lease holder (system:masters) can have
// certificates signed.
type Egress struct {
	CACert                  []byte
	ClientCert, ClientKey   []byte
	ServerCerts, ServerKeys [][]byte
}

// NewEgress makes a member's egress PKI with servers serving certificates.
func NewEgress(serverName string, servers int) (*Egress, error) {
	ca, err := pki.NewCA(EgressCAName, CAValidity)
	if err != nil {
		return nil, err
	}
	e := &Egress{CACert: ca.CertPEM}
	if e.ClientCert, e.ClientKey, err = Client(ca, Identity{User: EgressClientName}); err != nil {
		return nil, err
	}
	for range servers {
		cert, key, err := ca.IssueServing(serverName, []string{serverName}, nil, CertValidity)
		if err != nil {
			return nil, err
		}
		e.ServerCerts, e.ServerKeys = append(e.ServerCerts, cert), append(e.ServerKeys, key)
	}
	return e, nil
}
