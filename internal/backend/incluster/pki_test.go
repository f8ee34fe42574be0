package incluster

import (
	"crypto/x509"
	"encoding/pem"
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
