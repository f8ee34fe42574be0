package leasecreds

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

func TestKubeconfig(t *testing.T) {
	serverCA, err := pki.NewCA("server", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := pki.NewCA("client", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	access := &backend.Access{Endpoint: "https://127.0.0.1:6443", CACert: serverCA.CertPEM, ClientCACert: clientCA.CertPEM, ClientCAKey: clientCA.KeyPEM}
	now := time.Now().UTC().Truncate(time.Second)
	expires := metav1.NewTime(now.Add(30 * time.Minute))
	bound := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-abc"},
		Spec:       kobev1.ClusterLeaseSpec{Requester: kobev1.Requester{Identity: "my-org/my-repo:refs/heads/main"}},
		Status:     kobev1.ClusterLeaseStatus{InstanceRef: &kobev1.ObjectRef{Name: "pool-dev-3"}, ExpiresAt: &expires},
	}

	tests := []struct {
		name    string
		lease   *kobev1.ClusterLease
		access  *backend.Access
		wantErr string
	}{
		{name: "bound lease", lease: bound, access: access},
		{name: "pending lease", lease: &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "lease-q"}}, access: access, wantErr: "not bound"},
		{name: "client CA key does not match", lease: bound, access: &backend.Access{Endpoint: access.Endpoint, CACert: access.CACert, ClientCACert: clientCA.CertPEM, ClientCAKey: serverCA.KeyPEM}, wantErr: "client CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc, err := Kubeconfig(tt.access, tt.lease, now)
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

func pool(c *x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}
