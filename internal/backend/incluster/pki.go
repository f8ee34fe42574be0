package incluster

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
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
	// The egress keys exist with PKINeeds.Egress: the egress CA and the
	// API server's client certificate for the egress proxies.
	KeyEgressCACert     = "egress-ca.crt"
	KeyEgressClientCert = "egress-client.crt"
	KeyEgressClientKey  = "egress-client.key"
)

// secretOnly are the keys no pod gets: the client CA's key signs lease
// credentials, and the admin kubeconfig is the operator's.
var secretOnly = map[string]bool{KeyClientCAKey: true, KeyAdminKubeconfig: true}

const (
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
)

// endpoint is the member's API URL as callers reach it.
func endpoint(clusterIP string, port int32) string {
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(clusterIP, strconv.Itoa(int(port)))}).String()
}

// serviceDNSNames are the names the member's host Service answers to (for
// clusters with DNS); membercerts adds the in-member names.
func serviceDNSNames(svc, namespace string) []string {
	return []string{svc, svc + "." + namespace, svc + "." + namespace + ".svc", svc + "." + namespace + ".svc.cluster.local"}
}

// newPKI makes a member's PKI (membercerts) for its Service's clusterIP and
// returns the Secret's data.
func newPKI(m backend.Member, clusterIP string, port int32, set Settings) (map[string][]byte, error) {
	needs := set.PKI
	ip := net.ParseIP(clusterIP)
	if ip == nil {
		return nil, fmt.Errorf("service ClusterIP %q is not an IP address", clusterIP)
	}
	certs, err := membercerts.New(membercerts.Request{
		ServiceIP: net.ParseIP(MemberServiceIP), DNSNames: serviceDNSNames(serviceName(m), m.Namespace), IPs: []net.IP{ip},
	})
	if err != nil {
		return nil, err
	}
	adminKubeconfig, err := membercerts.AdminKubeconfig(certs.ServerCA.CertPEM, certs.AdminCert, certs.AdminKey, m.Name, endpoint(clusterIP, port))
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{
		KeyServerCACert: certs.ServerCA.CertPEM, KeyServingCert: certs.ServingCert, KeyServingKey: certs.ServingKey,
		KeyClientCACert: certs.ClientCA.CertPEM, KeyClientCAKey: certs.ClientCA.KeyPEM,
		KeySAKey: certs.SAKey, KeySAPub: certs.SAPub, KeyAdminKubeconfig: adminKubeconfig,
	}
	for _, c := range []struct {
		need bool
		id   membercerts.Identity
		key  string
	}{
		{needs.ControllerManager, membercerts.ControllerManager, KeyControllerManagerKubeconfig},
		{needs.Scheduler, membercerts.Scheduler, KeySchedulerKubeconfig},
	} {
		if !c.need {
			continue
		}
		kc, err := membercerts.Kubeconfig(certs.ClientCA, certs.ServerCA.CertPEM, m.Name, endpoint("127.0.0.1", port), c.id)
		if err != nil {
			return nil, err
		}
		data[c.key] = kc
	}
	if needs.Etcd {
		etcd, err := membercerts.NewEtcd()
		if err != nil {
			return nil, err
		}
		data[KeyEtcdCACert], data[KeyEtcdServerCert], data[KeyEtcdServerKey] = etcd.CA.CertPEM, etcd.ServerCert, etcd.ServerKey
		data[KeyEtcdClientCert], data[KeyEtcdClientKey] = etcd.ClientCert, etcd.ClientKey
	}
	if needs.KubeletClient {
		cert, key, err := membercerts.Client(certs.ClientCA, membercerts.KubeletClient)
		if err != nil {
			return nil, err
		}
		data[KeyKubeletClientCert], data[KeyKubeletClientKey] = cert, key
	}
	var egress *membercerts.Egress
	if needs.Egress {
		if len(set.Nodes) == 0 {
			return nil, errors.New("an egress proxy needs nodes")
		}
		if egress, err = membercerts.NewEgress(EgressHost, len(set.Nodes)); err != nil {
			return nil, err
		}
		data[KeyEgressCACert], data[KeyEgressClientCert], data[KeyEgressClientKey] = egress.CACert, egress.ClientCert, egress.ClientKey
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
	// One overlay key for all the member's nodes (node.Config.OverlayKeyFile).
	overlayKey := make([]byte, 32)
	if _, err := rand.Read(overlayKey); err != nil {
		return nil, err
	}
	for i, name := range set.Nodes {
		files, err := nodeFiles(m, name, endpoint(clusterIP, port), certs)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		files[NodeConfigFile] = set.NodeConfigs[i]
		files[NodeOverlayKey] = overlayKey
		if egress != nil {
			files[NodeEgressCert], files[NodeEgressKey], files[NodeEgressCACert] = egress.ServerCerts[i], egress.ServerKeys[i], egress.CACert
		}
		for f, v := range files {
			data[nodeKey(i, f)] = v
		}
	}
	return data, nil
}

// nodeFiles are one node pod's credentials: kubelet's kubeconfig and
// kube-proxy's (membercerts.Kubelet and KubeProxy), and kubelet's serving
// certificate.
func nodeFiles(m backend.Member, name, server string, certs *membercerts.Set) (map[string][]byte, error) {
	kubelet, err := membercerts.Kubeconfig(certs.ClientCA, certs.ServerCA.CertPEM, m.Name, server, membercerts.Kubelet(name))
	if err != nil {
		return nil, err
	}
	proxy, err := membercerts.Kubeconfig(certs.ClientCA, certs.ServerCA.CertPEM, m.Name, server, membercerts.KubeProxy)
	if err != nil {
		return nil, err
	}
	// The API server does not verify kubelets' serving certificates (no
	// --kubelet-certificate-authority: a node pod's IP is not known before
	// it is scheduled); it is signed by the server CA all the same.
	cert, key, err := membercerts.NodeServing(certs.ServerCA, name, nil)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		NodeKubeletKubeconfig: kubelet, NodeKubeProxyKubeconfig: proxy,
		NodeKubeletCert: cert, NodeKubeletKey: key, NodeClientCACert: certs.ClientCA.CertPEM,
	}, nil
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
