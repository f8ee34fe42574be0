package incluster

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestPKI(t *testing.T) {
	m := member("pool-ci-0", "")
	data, err := newPKI(m, "198.19.0.42", 6443, Settings{PKI: PKINeeds{Etcd: true, ControllerManager: true}})
	if err != nil {
		t.Fatal(err)
	}
	parse := func(key string) *x509.Certificate {
		blk, _ := pem.Decode(data[key])
		if blk == nil {
			t.Fatalf("%s is not PEM", key)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	roots := x509.NewCertPool()
	roots.AddCert(parse(KeyServerCACert))
	serving := parse(KeyServingCert)
	for _, host := range []string{"198.19.0.42", "127.0.0.1", "kobe-pool-ci-0.kobe.svc", "kubernetes.default.svc"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if !slices.ContainsFunc(serving.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("198.19.0.42")) }) {
		t.Errorf("serving certificate IPs %v lack the ClusterIP", serving.IPAddresses)
	}

	cfg, err := clientcmd.Load(data[KeyAdminKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if srv := cfg.Clusters[ctx.Cluster].Server; srv != "https://198.19.0.42:6443" {
		t.Errorf("admin kubeconfig server %s", srv)
	}
	blk, _ := pem.Decode(cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData)
	admin, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(parse(KeyClientCACert))
	if _, err := admin.Verify(x509.VerifyOptions{Roots: clientRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate: %v", err)
	}
	if !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin organizations %v", admin.Subject.Organization)
	}

	kcm, err := clientcmd.Load(data[KeyControllerManagerKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	if srv := kcm.Clusters[kcm.Contexts[kcm.CurrentContext].Cluster].Server; srv != "https://127.0.0.1:6443" {
		t.Errorf("controller manager kubeconfig server %s", srv)
	}
	etcdRoots := x509.NewCertPool()
	etcdRoots.AddCert(parse(KeyEtcdCACert))
	if _, err := parse(KeyEtcdServerCert).Verify(x509.VerifyOptions{Roots: etcdRoots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("etcd serving certificate: %v", err)
	}
	if _, err := parse(KeyEtcdClientCert).Verify(x509.VerifyOptions{Roots: etcdRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("etcd client certificate: %v", err)
	}

	bare, err := newPKI(m, "198.19.0.42", 6443, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{KeyEtcdCACert, KeyControllerManagerKubeconfig} {
		if _, ok := bare[k]; ok {
			t.Errorf("%s made though not needed", k)
		}
	}
	if _, err := newPKI(m, "", 6443, Settings{}); err == nil {
		t.Error("a PKI without a ClusterIP was made")
	}
}

// TestNodePKI: each node's kubeconfigs carry the identities the Node
// authorizer and kube-proxy's default binding expect, signed by the
// member's client CA, for the member's endpoint; the template's files land
// under their keys, and a file clashing with the PKI is refused.
func TestNodePKI(t *testing.T) {
	m := member("pool-ci-0", "")
	nodes := []string{NodePodName(m, 0), NodePodName(m, 1)}
	set := Settings{
		PKI:   PKINeeds{KubeletClient: true, Scheduler: true},
		Files: map[string][]byte{"admission.yaml": []byte("a")},
		Nodes: nodes, NodeConfigs: [][]byte{[]byte(`{"n":0}`), []byte(`{"n":1}`)},
	}
	data, err := newPKI(m, "198.19.0.42", 6443, set)
	if err != nil {
		t.Fatal(err)
	}
	clientRoots := x509.NewCertPool()
	blk, _ := pem.Decode(data[KeyClientCACert])
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	clientRoots.AddCert(ca)
	identity := func(kubeconfig []byte) (string, []string, string) {
		t.Helper()
		cfg, err := clientcmd.Load(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		blk, _ := pem.Decode(cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: clientRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", c.Subject.CommonName, err)
		}
		return c.Subject.CommonName, c.Subject.Organization, cfg.Clusters[ctx.Cluster].Server
	}
	for i, n := range nodes {
		cn, orgs, srv := identity(data[nodeKey(i, NodeKubeletKubeconfig)])
		if cn != "system:node:"+n || !slices.Equal(orgs, []string{"system:nodes"}) || srv != "https://198.19.0.42:6443" {
			t.Errorf("node %d kubelet: %s %v %s", i, cn, orgs, srv)
		}
		if cn, _, _ := identity(data[nodeKey(i, NodeKubeProxyKubeconfig)]); cn != "system:kube-proxy" {
			t.Errorf("node %d kube-proxy: %s", i, cn)
		}
		if string(data[nodeKey(i, NodeConfigFile)]) != fmt.Sprintf(`{"n":%d}`, i) || len(data[nodeKey(i, NodeKubeletCert)]) == 0 ||
			string(data[nodeKey(i, NodeClientCACert)]) != string(data[KeyClientCACert]) {
			t.Errorf("node %d files", i)
		}
	}
	// The overlay key: random, one for all the member's nodes, another for
	// the next member.
	key := data[nodeKey(0, NodeOverlayKey)]
	if len(key) != 32 || string(key) != string(data[nodeKey(1, NodeOverlayKey)]) {
		t.Errorf("overlay keys %x and %x, want one 32-byte key for both nodes", key, data[nodeKey(1, NodeOverlayKey)])
	}
	if next, err := newPKI(member("pool-ci-1", ""), "198.19.0.43", 6443, set); err != nil || string(next[nodeKey(0, NodeOverlayKey)]) == string(key) {
		t.Errorf("another member's overlay key: %v, the same: %v", err, string(next[nodeKey(0, NodeOverlayKey)]) == string(key))
	}
	if cn, _, srv := identity(data[KeySchedulerKubeconfig]); cn != "system:kube-scheduler" || srv != "https://127.0.0.1:6443" {
		t.Errorf("scheduler: %s %s", cn, srv)
	}
	blk, _ = pem.Decode(data[KeyKubeletClientCert])
	kc, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || !slices.Equal(kc.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("kubelet client certificate: %v %v", err, kc)
	}
	if string(data["admission.yaml"]) != "a" {
		t.Error("the template's file is missing")
	}
	for _, bad := range []map[string][]byte{{KeySAKey: nil}, {"node-0-x": nil}} {
		if _, err := newPKI(m, "198.19.0.42", 6443, Settings{Files: bad}); err == nil {
			t.Errorf("file %v accepted", bad)
		}
	}
	if _, err := newPKI(m, "198.19.0.42", 6443, Settings{Nodes: nodes}); err == nil {
		t.Error("nodes without configs accepted")
	}
}
