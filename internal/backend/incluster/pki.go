package incluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

// Keys of a member's PKI Secret. Pods see them as files in
// RenderInput.PKIDir, except KeyClientCAKey and KeyAdminKubeconfig.
const (
	KeyServerCACert    = "ca.crt"
	KeyServingCert     = "apiserver.crt"
	KeyServingKey      = "apiserver.key"
	KeyClientCACert    = "client-ca.crt"
	KeyClientCAKey     = "client-ca.key"
	KeySAKey           = "sa.key"
	KeySAPub           = "sa.pub"
	KeyAdminKubeconfig = "admin.kubeconfig"
	// KeyControllerManagerKubeconfig exists with PKINeeds.ControllerManager.
	KeyControllerManagerKubeconfig = "controller-manager.kubeconfig"
	// The etcd keys exist with PKINeeds.Etcd.
	KeyEtcdCACert     = "etcd-ca.crt"
	KeyEtcdServerCert = "etcd-server.crt"
	KeyEtcdServerKey  = "etcd-server.key"
	KeyEtcdClientCert = "etcd-client.crt"
	KeyEtcdClientKey  = "etcd-client.key"
	// KeySchedulerKubeconfig exists with PKINeeds.Scheduler.
	KeySchedulerKubeconfig = "scheduler.kubeconfig"
	// The kubelet client keys exist with PKINeeds.KubeletClient.
	KeyKubeletClientCert = "apiserver-kubelet-client.crt"
	KeyKubeletClientKey  = "apiserver-kubelet-client.key"
)

// secretOnly are the keys no pod gets: the client CA's key signs lease
// credentials, and the admin kubeconfig is the operator's.
var secretOnly = map[string]bool{KeyClientCAKey: true, KeyAdminKubeconfig: true}

const (
	// certValidity outlasts any member; caValidity every certificate.
	certValidity = 10 * 365 * 24 * time.Hour
	caValidity   = certValidity + 24*time.Hour

	// MemberServiceIP is the "kubernetes" Service address inside the member
	// (MemberServiceCIDR is the member's own Service range). Without nodes
	// it is virtual; with node pods their kube-proxy gives it meaning inside
	// each node pod's network namespace only. It lies in MemberNetwork,
	// within 198.18.0.0/15, so a packet for an address nothing serves is
	// never sent off the machine to a real network.
	MemberServiceIP   = "198.19.240.1"
	MemberServiceCIDR = "198.19.240.0/24"
	// MemberNetwork holds every address a member uses inside its node
	// pods: MemberServiceCIDR and the node pods' pod ranges. The host
	// cluster's Service and pod addresses must lie outside it: a member
	// whose Service ClusterIP falls inside is refused.
	MemberNetwork = "198.19.240.0/20"

	// AdminUser is the admin certificate's user, in system:masters.
	AdminUser = "kobe-admin"
)

// endpoint is the member's API URL as callers reach it.
func endpoint(clusterIP string, port int32) string {
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(clusterIP, strconv.Itoa(int(port)))}).String()
}

// serviceDNSNames are the names the member's host Service answers to (for
// clusters with DNS) and the in-member names of its "kubernetes" Service.
func serviceDNSNames(svc, namespace string) []string {
	return []string{
		svc, svc + "." + namespace, svc + "." + namespace + ".svc", svc + "." + namespace + ".svc.cluster.local",
		"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}
}

// newPKI makes a member's PKI for its Service's clusterIP and returns the
// Secret's data.
func newPKI(m backend.Member, clusterIP string, port int32, set Settings) (map[string][]byte, error) {
	needs := set.PKI
	ip := net.ParseIP(clusterIP)
	if ip == nil {
		return nil, fmt.Errorf("service ClusterIP %q is not an IP address", clusterIP)
	}
	serverCA, err := pki.NewCA("kobe-member-server-ca", caValidity)
	if err != nil {
		return nil, err
	}
	ips := []net.IP{ip, net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP(MemberServiceIP)}
	servingCert, servingKey, err := serverCA.IssueServing("kube-apiserver", serviceDNSNames(serviceName(m), m.Namespace), ips, certValidity)
	if err != nil {
		return nil, err
	}
	clientCA, err := pki.NewCA("kobe-member-client-ca", caValidity)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notBefore, notAfter := now.Add(-5*time.Minute), now.Add(certValidity)
	adminCert, adminKey, err := clientCA.IssueClient(AdminUser, []string{"system:masters"}, notBefore, notAfter)
	if err != nil {
		return nil, err
	}
	adminKubeconfig, err := pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName: m.Name, Server: endpoint(clusterIP, port), CAData: serverCA.CertPEM,
		UserName: AdminUser, ClientCertPEM: adminCert, ClientKeyPEM: adminKey,
	})
	if err != nil {
		return nil, err
	}
	saKey, saPub, err := serviceAccountKeys()
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{
		KeyServerCACert: serverCA.CertPEM, KeyServingCert: servingCert, KeyServingKey: servingKey,
		KeyClientCACert: clientCA.CertPEM, KeyClientCAKey: clientCA.KeyPEM,
		KeySAKey: saKey, KeySAPub: saPub, KeyAdminKubeconfig: adminKubeconfig,
	}
	for _, c := range []struct {
		need bool
		user string
		key  string
	}{
		{needs.ControllerManager, "system:kube-controller-manager", KeyControllerManagerKubeconfig},
		{needs.Scheduler, "system:kube-scheduler", KeySchedulerKubeconfig},
	} {
		if !c.need {
			continue
		}
		cert, key, err := clientCA.IssueClient(c.user, nil, notBefore, notAfter)
		if err != nil {
			return nil, err
		}
		kc, err := pki.Kubeconfig(pki.KubeconfigInput{
			ClusterName: m.Name, Server: endpoint("127.0.0.1", port), CAData: serverCA.CertPEM,
			UserName: c.user, ClientCertPEM: cert, ClientKeyPEM: key,
		})
		if err != nil {
			return nil, err
		}
		data[c.key] = kc
	}
	if needs.Etcd {
		etcdCA, err := pki.NewCA("kobe-member-etcd-ca", caValidity)
		if err != nil {
			return nil, err
		}
		srvCert, srvKey, err := etcdCA.IssueServing("etcd", []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, certValidity)
		if err != nil {
			return nil, err
		}
		cliCert, cliKey, err := etcdCA.IssueClient("kube-apiserver-etcd-client", nil, notBefore, notAfter)
		if err != nil {
			return nil, err
		}
		data[KeyEtcdCACert], data[KeyEtcdServerCert], data[KeyEtcdServerKey] = etcdCA.CertPEM, srvCert, srvKey
		data[KeyEtcdClientCert], data[KeyEtcdClientKey] = cliCert, cliKey
	}
	if needs.KubeletClient {
		cert, key, err := clientCA.IssueClient("kube-apiserver-kubelet-client", []string{"system:masters"}, notBefore, notAfter)
		if err != nil {
			return nil, err
		}
		data[KeyKubeletClientCert], data[KeyKubeletClientKey] = cert, key
	}
	for k, v := range set.Files {
		if _, taken := data[k]; taken || strings.HasPrefix(k, "node-") {
			return nil, fmt.Errorf("template file %q clashes with the PKI's keys", k)
		}
		data[k] = v
	}
	if len(set.NodeConfigs) != len(set.Nodes) {
		return nil, fmt.Errorf("%d node configs for %d nodes", len(set.NodeConfigs), len(set.Nodes))
	}
	for i, name := range set.Nodes {
		files, err := nodeFiles(m, name, endpoint(clusterIP, port), serverCA, clientCA, notBefore, notAfter)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		files[NodeConfigFile] = set.NodeConfigs[i]
		for f, v := range files {
			data[nodeKey(i, f)] = v
		}
	}
	return data, nil
}

// nodeFiles are one node pod's credentials: kubelet's kubeconfig
// (system:node:<name>, which the Node authorizer and NodeRestriction hold
// to its own node), kube-proxy's (system:kube-proxy, bound to
// system:node-proxier by the API server's default RBAC), and kubelet's
// serving certificate.
func nodeFiles(m backend.Member, name, server string, serverCA, clientCA *pki.CA, notBefore, notAfter time.Time) (map[string][]byte, error) {
	kubeconfig := func(user string, groups []string) ([]byte, error) {
		cert, key, err := clientCA.IssueClient(user, groups, notBefore, notAfter)
		if err != nil {
			return nil, err
		}
		return pki.Kubeconfig(pki.KubeconfigInput{
			ClusterName: m.Name, Server: server, CAData: serverCA.CertPEM,
			UserName: user, ClientCertPEM: cert, ClientKeyPEM: key,
		})
	}
	kubelet, err := kubeconfig("system:node:"+name, []string{"system:nodes"})
	if err != nil {
		return nil, err
	}
	proxy, err := kubeconfig("system:kube-proxy", nil)
	if err != nil {
		return nil, err
	}
	// The API server does not verify kubelets' serving certificates (no
	// --kubelet-certificate-authority: a node pod's IP is not known before
	// it is scheduled); it is signed by the server CA all the same.
	cert, key, err := serverCA.IssueServing(name, []string{name}, nil, certValidity)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		NodeKubeletKubeconfig: kubelet, NodeKubeProxyKubeconfig: proxy,
		NodeKubeletCert: cert, NodeKubeletKey: key, NodeClientCACert: clientCA.CertPEM,
	}, nil
}

// serviceAccountKeys makes the key pair that signs and verifies the
// member's ServiceAccount tokens.
func serviceAccountKeys() (keyPEM, pubPEM []byte, err error) {
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

// accessFrom reads a member's Access from its PKI Secret.
func accessFrom(sec *corev1.Secret, clusterIP string, port int32) (*backend.Access, error) {
	for _, k := range []string{KeyServerCACert, KeyClientCACert, KeyClientCAKey, KeyAdminKubeconfig} {
		if len(sec.Data[k]) == 0 {
			return nil, fmt.Errorf("PKI Secret %s has no %s", sec.Name, k)
		}
	}
	return &backend.Access{
		Endpoint:        endpoint(clusterIP, port),
		CACert:          sec.Data[KeyServerCACert],
		ClientCACert:    sec.Data[KeyClientCACert],
		ClientCAKey:     sec.Data[KeyClientCAKey],
		AdminKubeconfig: sec.Data[KeyAdminKubeconfig],
	}, nil
}
