package leasecreds

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

func TestKubeconfig(t *testing.T) {
	access, serverCA, clientCA := newAccess(t)
	now := time.Now().UTC().Truncate(time.Second)
	boundAt := metav1.NewTime(now.Add(-5 * time.Minute))
	expires := metav1.NewTime(now.Add(30 * time.Minute))
	bound := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-abc", UID: "uid-lease"},
		Spec: kobev1.ClusterLeaseSpec{Requester: kobev1.Requester{Identity: "my-org/my-repo:refs/heads/main"},
			TTL: &metav1.Duration{Duration: 35 * time.Minute}, MaxTTL: &metav1.Duration{Duration: time.Hour}},
		Status: kobev1.ClusterLeaseStatus{InstanceRef: &kobev1.ObjectRef{Name: "pool-dev-3", UID: "uid-member"}, BoundAt: &boundAt, ExpiresAt: &expires},
	}
	member := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-dev-3", UID: "uid-member"},
		Spec:       kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: "lease-abc", UID: "uid-lease", BoundAt: &boundAt}},
	}
	other := member.DeepCopy()
	other.Spec.LeaseRef.UID = "uid-other-lease"
	expired := bound.DeepCopy()
	expired.Status.ExpiresAt = &boundAt

	tests := []struct {
		name    string
		lease   *kobev1.ClusterLease
		member  *kobev1.ClusterInstance
		access  *backend.Access
		wantErr string
	}{
		{name: "bound lease", lease: bound, member: member, access: access},
		{name: "pending lease", lease: &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "lease-q"}}, member: member, access: access, wantErr: "not bound"},
		{name: "member holds another lease", lease: bound, member: other, access: access, wantErr: "does not hold lease"},
		{name: "expired lease", lease: expired, member: member, access: access, wantErr: "expired"},
		{name: "client CA key does not match", lease: bound, member: member, access: &backend.Access{Endpoint: access.Endpoint, CACert: access.CACert, ClientCACert: clientCA.CertPEM, ClientCAKey: serverCA.KeyPEM}, wantErr: "client CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc, err := Kubeconfig(tt.access, tt.lease, tt.member, nil, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(kc)
			if err != nil {
				t.Fatal(err)
			}
			cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
			if cluster.Server != access.Endpoint || string(cluster.CertificateAuthorityData) != string(serverCA.CertPEM) {
				t.Errorf("cluster = %s with CA %q, want the member's endpoint and server CA", cluster.Server, cluster.CertificateAuthorityData)
			}
			user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
			block, _ := pem.Decode(user.ClientCertificateData)
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if !cert.NotAfter.Equal(expires.Time) {
				t.Errorf("NotAfter = %s, want the lease's expiry %s", cert.NotAfter, expires.Time)
			}
			if want := "kobe-lease:lease-abc:my-org/my-repo:refs/heads/main"; cert.Subject.CommonName != want {
				t.Errorf("CN = %q, want %q", cert.Subject.CommonName, want)
			}
			if len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != AdminGroup {
				t.Errorf("O = %v, want [%s]", cert.Subject.Organization, AdminGroup)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(clientCA.Cert), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("certificate does not verify against the member's client CA: %v", err)
			}
		})
	}
}

// TestKubeconfigIgnoresForgedExpiry: a status.expiresAt written later than
// the lease can last (boundAt + ttl + granted extensions, each at most the
// max TTL recorded at creation), as anyone with clusterleases/status can,
// does not lengthen the certificate; neither does a forged boundAt or
// extension count beyond the lease's cap.
func TestKubeconfigIgnoresForgedExpiry(t *testing.T) {
	access, _, _ := newAccess(t)
	now := time.Now().UTC().Truncate(time.Second)
	boundAt := metav1.NewTime(now.Add(-10 * time.Minute))
	member := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-dev-3", UID: "uid-member"},
		Spec:       kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: "lease-abc", UID: "uid-lease", BoundAt: &boundAt}},
	}
	forged := metav1.NewTime(now.Add(1000 * time.Hour))
	laterBind := metav1.NewTime(now.Add(500 * time.Hour))
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-abc", UID: "uid-lease"},
		Spec: kobev1.ClusterLeaseSpec{TTL: &metav1.Duration{Duration: 30 * time.Minute},
			MaxTTL: &metav1.Duration{Duration: time.Hour}, MaxExtensions: ptr.To[int32](1)},
		Status: kobev1.ClusterLeaseStatus{InstanceRef: &kobev1.ObjectRef{Name: "pool-dev-3", UID: "uid-member"},
			BoundAt: &laterBind, ExpiresAt: &forged, Extensions: 7},
	}
	// One extension of at most 1h counts, from the member's boundAt.
	want := boundAt.Add(30*time.Minute + time.Hour)
	if got := NotAfter(l, member, nil); !got.Equal(want) {
		t.Fatalf("NotAfter = %s, want %s", got, want)
	}
	kc, err := Kubeconfig(access, l, member, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].ClientCertificateData)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(want) {
		t.Fatalf("certificate NotAfter %s, want the lease's limit %s, not the forged %s", cert.NotAfter, want, forged.Time)
	}
	// Once the limit has passed, nothing is minted whatever the status says.
	if _, err := Kubeconfig(access, l, member, nil, want.Add(time.Second)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("minting past the limit: %v", err)
	}
}

func pool(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}

// newAccess is a member's access material: a server CA, a client CA, and
// the backend.Access built from them.
func newAccess(t *testing.T) (*backend.Access, *pki.CA, *pki.CA) {
	t.Helper()
	serverCA, err := pki.NewCA("server", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := pki.NewCA("client", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &backend.Access{Endpoint: "https://127.0.0.1:6443", CACert: serverCA.CertPEM, ClientCACert: clientCA.CertPEM, ClientCAKey: clientCA.KeyPEM}, serverCA, clientCA
}

// TestProxyKubeconfig: a Proxy-mode kubeconfig points at the connect proxy
// under the base URL, verified with kobe's CA, with the same lease
// certificate as a Direct one; base URLs that are not plain https are
// refused.
func TestProxyKubeconfig(t *testing.T) {
	access, _, clientCA := newAccess(t)
	now := time.Now().UTC().Truncate(time.Second)
	boundAt := metav1.NewTime(now.Add(-time.Minute))
	expires := metav1.NewTime(now.Add(30 * time.Minute))
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-abc", UID: "uid-lease"},
		Spec:       kobev1.ClusterLeaseSpec{Requester: kobev1.Requester{Identity: "ci"}, TTL: &metav1.Duration{Duration: 31 * time.Minute}},
		Status:     kobev1.ClusterLeaseStatus{InstanceRef: &kobev1.ObjectRef{Name: "m", UID: "uid-member"}, BoundAt: &boundAt, ExpiresAt: &expires},
	}
	member := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "uid-member"},
		Spec:       kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: "lease-abc", UID: "uid-lease", BoundAt: &boundAt}},
	}
	kobeCA := []byte("-----BEGIN CERTIFICATE-----\nkobe\n-----END CERTIFICATE-----\n")
	for base, want := range map[string]string{
		"https://kobe.example.com":          "https://kobe.example.com/connect/lease-abc",
		"https://kobe.example.com/":         "https://kobe.example.com/connect/lease-abc",
		"https://127.0.0.1:8443/kobe":       "https://127.0.0.1:8443/kobe/connect/lease-abc",
		"https://[::1]:8443":                "https://[::1]:8443/connect/lease-abc",
		"http://kobe.example.com":           "",
		"https://user:pw@kobe.example.com":  "",
		"https://kobe.example.com/?x=1":     "",
		"kobe.example.com":                  "",
		"https://kobe.example.com/#section": "",
	} {
		kc, err := ProxyKubeconfig(access, l, member, nil, now, base, kobeCA)
		if want == "" {
			if err == nil {
				t.Errorf("base %q: minted a kubeconfig, want an error", base)
			}
			continue
		}
		if err != nil {
			t.Fatalf("base %q: %v", base, err)
		}
		cfg, err := clientcmd.Load(kc)
		if err != nil {
			t.Fatal(err)
		}
		cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
		if cluster.Server != want || string(cluster.CertificateAuthorityData) != string(kobeCA) {
			t.Errorf("base %q: server %q with CA %q, want %q with kobe's CA", base, cluster.Server, cluster.CertificateAuthorityData, want)
		}
		block, _ := pem.Decode(cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].ClientCertificateData)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if cert.Subject.CommonName != CommonName(l) || !cert.NotAfter.Equal(expires.Time) {
			t.Errorf("certificate %q until %s, want %q until %s", cert.Subject.CommonName, cert.NotAfter, CommonName(l), expires.Time)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool(clientCA.Cert), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("certificate does not verify against the member's client CA: %v", err)
		}
	}
}

// TestLeaseName: the lease a CN names is read back from every CN that
// CommonName writes, identities with colons included; other CNs name none.
func TestLeaseName(t *testing.T) {
	for _, tt := range []struct {
		name, identity string
	}{
		{"lease-3f9a1c0d2b7e", ""},
		{"lease-3f9a1c0d2b7e", "ci"},
		{"lease-3f9a1c0d2b7e", "my-org/my-repo:refs/heads/main"},
		{"my.lease", "system:serviceaccount:ci:runner"},
	} {
		l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: tt.name}, Spec: kobev1.ClusterLeaseSpec{Requester: kobev1.Requester{Identity: tt.identity}}}
		cn := CommonName(l)
		if got, ok := LeaseName(cn); !ok || got != tt.name {
			t.Errorf("LeaseName(%q) = %q %v, want %q", cn, got, ok, tt.name)
		}
	}
	for _, cn := range []string{
		"", "kobe-lease:", "kobe-lease::ci", "kubernetes-admin", "system:node:n1", "system:kube-controller-manager",
		"Kobe-Lease:lease-a", "kobe-lease-a", " kobe-lease:lease-a", "kobe-lease:LEASE-A", "kobe-lease:lease-a/b:ci",
		"kobe-lease:../lease-a", "kobe-lease:lease a", "xkobe-lease:lease-a",
	} {
		if got, ok := LeaseName(cn); ok {
			t.Errorf("LeaseName(%q) = %q, want no lease", cn, got)
		}
	}
}
