package memberaccess_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
)

// realAccess is a member's access material as the backends make it: the
// admin kubeconfig from membercerts.AdminKubeconfig.
func realAccess(t *testing.T, cluster, server string) *backend.Access {
	t.Helper()
	a, err := membercerts.NewAuthorities()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := membercerts.AdminKubeconfig(a.ServerCA.CertPEM, a.AdminCert, a.AdminKey, cluster, server)
	if err != nil {
		t.Fatal(err)
	}
	return &backend.Access{Endpoint: server, CACert: a.ServerCA.CertPEM, ClientCACert: a.ClientCA.CertPEM,
		ClientCAKey: a.ClientCA.KeyPEM, AdminKubeconfig: kc}
}

// TestAdminCredentialIsCompact: the backends' admin kubeconfig is sealed in
// its compact form, a third of the whole, and opens as the same bytes.
func TestAdminCredentialIsCompact(t *testing.T) {
	s := sealer(t, 1)
	for _, cluster := range []string{"kobe-sim-member", "kobe-member", "pool-ci-small-0"} {
		a := realAccess(t, cluster, "https://10.96.0.12:6443")
		m := member("m", "1")
		sealed, err := s.Seal(m, a)
		if err != nil {
			t.Fatal(err)
		}
		if len(sealed.SealedAdminKubeconfig) != 0 || len(sealed.SealedAdminCredential) == 0 {
			t.Fatalf("%s: sealed whole (%d bytes), want the compact credential", cluster, len(sealed.SealedAdminKubeconfig))
		}
		if len(sealed.SealedAdminCredential)*2 > len(a.AdminKubeconfig) {
			t.Fatalf("%s: the compact credential is %d bytes for a kubeconfig of %d", cluster, len(sealed.SealedAdminCredential), len(a.AdminKubeconfig))
		}
		m.Status.Access = sealed
		got, err := s.Full(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.AdminKubeconfig, a.AdminKubeconfig) {
			t.Fatalf("%s: opened another kubeconfig:\n%s\nwant\n%s", cluster, got.AdminKubeconfig, a.AdminKubeconfig)
		}
		if _, err := memberaccess.RESTConfig(got.AdminKubeconfig, time.Second, "test"); err != nil {
			t.Fatal(err)
		}
		compact, _ := json.Marshal(sealed)
		t.Logf("%s: the admin kubeconfig of %d bytes sealed in %d; status.access %d bytes as JSON", cluster, len(a.AdminKubeconfig), len(sealed.SealedAdminCredential), len(compact))
	}
}

// TestAdminKubeconfigSealedWholeOtherwise: an admin kubeconfig the compact
// form cannot rebuild byte for byte is sealed whole and opens unchanged,
// as members sealed before the compact form do.
func TestAdminKubeconfigSealedWholeOtherwise(t *testing.T) {
	s := sealer(t, 1)
	base := realAccess(t, "kobe-member", "https://10.96.0.12:6443")
	cfg, err := clientcmd.Load(base.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuthInfos[membercerts.AdminUser] == nil || cfg.Clusters["kobe-member"] == nil || cfg.Contexts["kobe-member"] == nil {
		t.Fatalf("the fixture is not what the cases edit: %s", base.AdminKubeconfig)
	}
	// write applies edit to a copy of the fixture's config and encodes it.
	write := func(edit func()) []byte {
		pristine := cfg.DeepCopy()
		defer func() { cfg = pristine }()
		edit()
		out, err := clientcmd.Write(*cfg)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	other := realAccess(t, "kobe-member", "https://10.96.0.12:6443")
	for name, kc := range map[string][]byte{
		"not a kubeconfig": []byte("admin-kubeconfig"),
		"a token user": write(func() {
			u := cfg.AuthInfos[membercerts.AdminUser]
			u.ClientCertificateData, u.ClientKeyData, u.Token = nil, nil, "t"
		}),
		"another CA than caCert": write(func() { cfg.Clusters["kobe-member"].CertificateAuthorityData = other.CACert }),
		"a certificate chain": write(func() {
			u := cfg.AuthInfos[membercerts.AdminUser]
			u.ClientCertificateData = append(u.ClientCertificateData, base.CACert...)
		}),
		"a TLS server name": write(func() { cfg.Clusters["kobe-member"].TLSServerName = "api.member" }),
		"a second context":  write(func() { cfg.Contexts["extra"] = cfg.Contexts["kobe-member"].DeepCopy() }),
		"a context of another name": write(func() {
			cfg.Contexts["admin"] = cfg.Contexts["kobe-member"]
			delete(cfg.Contexts, "kobe-member")
			cfg.CurrentContext = "admin"
		}),
		"an impersonating admin user": write(func() { cfg.AuthInfos[membercerts.AdminUser].Impersonate = "system:admin" }),
	} {
		t.Run(name, func(t *testing.T) {
			a := *base
			a.AdminKubeconfig = kc
			m := member("m", "1")
			sealed, err := s.Seal(m, &a)
			if err != nil {
				t.Fatal(err)
			}
			if len(sealed.SealedAdminCredential) != 0 || len(sealed.SealedAdminKubeconfig) == 0 {
				t.Fatal("sealed in the compact form, which would lose what makes it different")
			}
			m.Status.Access = sealed
			got, err := s.Full(m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.AdminKubeconfig, kc) {
				t.Fatalf("opened another kubeconfig:\n%s\nwant\n%s", got.AdminKubeconfig, kc)
			}
		})
	}
}

// TestAdminCredentialDoesNotMove: the compact credential of one member does
// not open in another's status, nor as the whole-kubeconfig field.
func TestAdminCredentialDoesNotMove(t *testing.T) {
	s := sealer(t, 1)
	a := realAccess(t, "kobe-member", "https://10.96.0.12:6443")
	sealed, err := s.Seal(member("victim", "1"), a)
	if err != nil {
		t.Fatal(err)
	}
	other := member("other", "2")
	other.Status.Access = sealed.DeepCopy()
	if got, err := s.Full(other); err == nil {
		t.Fatalf("another member's credential opened: %s", got.AdminKubeconfig)
	}
	asWhole := member("victim", "1")
	asWhole.Status.Access = sealed.DeepCopy()
	asWhole.Status.Access.SealedAdminKubeconfig, asWhole.Status.Access.SealedAdminCredential = sealed.SealedAdminCredential, nil
	if got, err := s.Full(asWhole); err == nil || !strings.Contains(err.Error(), "does not open") {
		t.Fatalf("the credential opened as a whole kubeconfig: %v, %s", err, got)
	}
}
