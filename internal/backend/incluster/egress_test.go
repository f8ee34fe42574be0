package incluster

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// TestEgressPKI: the channel between the API server and its node pods'
// egress proxies has a CA of its own (not the member's server or client
// CA, which a lease holder can have sign), whose key is kept nowhere; the
// API server's certificate is a client certificate of EgressClientName,
// each proxy's a serving certificate for EgressHost.
func TestEgressPKI(t *testing.T) {
	m := member("pool-ci-0", "")
	nodes := []string{NodePodName(m, 0), NodePodName(m, 1)}
	set := Settings{PKI: PKINeeds{Egress: true}, Nodes: nodes, NodeConfigs: [][]byte{[]byte("{}"), []byte("{}")}}
	data, err := newPKI(m, "198.19.0.42", 6443, set)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(key string) *x509.Certificate {
		t.Helper()
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
	ca := parse(KeyEgressCACert)
	if ca.Subject.CommonName != membercerts.EgressCAName || !ca.IsCA {
		t.Errorf("egress CA %s", ca.Subject)
	}
	for _, other := range []string{KeyServerCACert, KeyClientCACert} {
		if parse(other).Equal(ca) || string(parse(other).RawSubjectPublicKeyInfo) == string(ca.RawSubjectPublicKeyInfo) {
			t.Errorf("the egress CA is %s", other)
		}
	}
	for k, v := range data {
		if strings.Contains(k, "egress") && strings.Contains(string(v), "PRIVATE KEY") && !strings.HasSuffix(k, "egress-client.key") && !strings.HasSuffix(k, "egress-proxy.key") {
			t.Errorf("%s holds a private key", k)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	client := parse(KeyEgressClientCert)
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || client.Subject.CommonName != membercerts.EgressClientName {
		t.Errorf("the API server's egress certificate %s: %v", client.Subject, err)
	}
	if len(client.Subject.Organization) != 0 {
		t.Errorf("the API server's egress certificate has groups %v", client.Subject.Organization)
	}
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(parse(KeyClientCACert))
	if _, err := client.Verify(x509.VerifyOptions{Roots: clientRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the member's client CA verifies the egress certificate")
	}
	for i := range nodes {
		srv := parse(nodeKey(i, NodeEgressCert))
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: EgressHost}); err != nil {
			t.Errorf("node %d's proxy certificate: %v", i, err)
		}
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
			t.Errorf("node %d's proxy certificate is a client certificate", i)
		}
		if string(data[nodeKey(i, NodeEgressCACert)]) != string(data[KeyEgressCACert]) || len(data[nodeKey(i, NodeEgressKey)]) == 0 {
			t.Errorf("node %d's egress files", i)
		}
	}

	// The control-plane pod sees the CA and its own keypair, no proxy's.
	items := pkiItems(data, nil)
	var keys []string
	for _, it := range items {
		keys = append(keys, it.Key)
	}
	for _, want := range []string{KeyEgressCACert, KeyEgressClientCert, KeyEgressClientKey} {
		if !slices.Contains(keys, want) {
			t.Errorf("the control-plane pod lacks %s: %v", want, keys)
		}
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "node-") {
			t.Errorf("the control-plane pod sees %s", k)
		}
	}

	if _, err := newPKI(m, "198.19.0.42", 6443, Settings{PKI: PKINeeds{Egress: true}}); err == nil {
		t.Error("an egress proxy without nodes was accepted")
	}
}

// TestEgressRender: the egress Service selects the member's node pods
// only, on the proxy's port; a control-plane pod knows its address as
// EgressHost; a node pod mounts its proxy's files.
func TestEgressRender(t *testing.T) {
	m := member("m", "")
	svc := renderEgressService(kobev1.BackendKubernetes, m)
	if svc.Name != "kobe-m-egress" || svc.Spec.Selector[LabelComponent] != ComponentNode || svc.Spec.Selector[LabelMemberUID] != "uid-1" ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != node.EgressProxyPort || svc.Spec.Ports[0].TargetPort.IntVal != node.EgressProxyPort {
		t.Errorf("egress Service %+v", svc)
	}
	if svc.OwnerReferences[0].UID != m.UID || svc.Labels[LabelMemberUID] != "uid-1" {
		t.Errorf("egress Service meta %+v", svc.ObjectMeta)
	}

	full := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("1m"), corev1.ResourceMemory: q("1Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("1m"), corev1.ResourceMemory: q("1Mi")},
	}
	data := map[string][]byte{KeyEgressCACert: []byte("x"), KeyEgressClientCert: []byte("x"), KeyEgressClientKey: []byte("x")}
	for _, f := range []string{NodeConfigFile, NodeKubeletKubeconfig, NodeKubeProxyKubeconfig, NodeKubeletCert, NodeKubeletKey, NodeClientCACert, NodeOverlayKey} {
		data[nodeKey(0, f)] = []byte("x")
	}
	nodes := []string{NodePodName(m, 0)}
	np := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "node", Resources: full}}}}
	np.Name, np.Labels = nodes[0], map[string]string{LabelComponent: ComponentNode}
	if err := finishPod(kobev1.BackendKubernetes, m, np.DeepCopy(), 1, Settings{Nodes: nodes}, data, "10.96.0.20"); err == nil {
		t.Error("a node pod of a member with egress was given no proxy certificate")
	}
	for _, f := range []string{NodeEgressCert, NodeEgressKey, NodeEgressCACert} {
		data[nodeKey(0, f)] = []byte("x")
	}
	if err := finishPod(kobev1.BackendKubernetes, m, &np, 1, Settings{Nodes: nodes}, data, "10.96.0.20"); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, it := range np.Spec.Volumes[0].Secret.Items {
		files = append(files, it.Path)
	}
	for _, want := range []string{NodeEgressCert, NodeEgressKey, NodeEgressCACert} {
		if !slices.Contains(files, want) {
			t.Errorf("node pod files %v lack %s", files, want)
		}
	}
	if len(np.Spec.HostAliases) != 0 {
		t.Errorf("node pod host aliases %v", np.Spec.HostAliases)
	}
	cp := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Resources: full}}}}
	if err := finishPod(kobev1.BackendKubernetes, m, &cp, 0, Settings{Nodes: nodes}, data, "10.96.0.20"); err != nil {
		t.Fatal(err)
	}
	if h := cp.Spec.HostAliases; len(h) != 1 || h[0].IP != "10.96.0.20" || !slices.Equal(h[0].Hostnames, []string{EgressHost}) {
		t.Errorf("control-plane pod host aliases %v", h)
	}
}
