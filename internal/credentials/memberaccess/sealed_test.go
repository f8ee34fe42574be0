package memberaccess_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
)

func sealer(t *testing.T, b byte) *memberaccess.Sealer {
	t.Helper()
	s, err := memberaccess.NewSealer(bytes.Repeat([]byte{b}, memberaccess.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func member(name, uid string) *kobev1.ClusterInstance {
	return &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("uid-" + uid)},
		Status:     kobev1.ClusterInstanceStatus{Endpoint: "https://127.0.0.1:6443"},
	}
}

var access = &backend.Access{
	Endpoint: "https://127.0.0.1:6443", CACert: []byte("ca"), ClientCACert: []byte("client-ca"),
	ClientCAKey: []byte("client-ca-key"), AdminKubeconfig: []byte("admin-kubeconfig"),
}

func TestSealAndOpen(t *testing.T) {
	s := sealer(t, 1)
	m := member("m", "1")
	sealed, err := s.Seal(m, access)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed.SealedClientCAKey, access.ClientCAKey) || bytes.Contains(sealed.SealedAdminKubeconfig, access.AdminKubeconfig) {
		t.Fatal("sealed fields hold the plain text")
	}
	m.Status.Access = sealed
	got, err := s.Full(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.ClientCAKey) != "client-ca-key" || string(got.AdminKubeconfig) != "admin-kubeconfig" || string(got.CACert) != "ca" ||
		string(got.ClientCACert) != "client-ca" || got.Endpoint != access.Endpoint {
		t.Fatalf("opened %+v", got)
	}
	// The cache's copy: no admin kubeconfig.
	cached := m.DeepCopy()
	cached.Status.Access.SealedAdminKubeconfig = nil
	if a, err := s.ForLeases(cached); err != nil || a.AdminKubeconfig != nil || string(a.ClientCAKey) != "client-ca-key" {
		t.Fatalf("ForLeases on the cached copy: %+v, %v", a, err)
	}
	if _, err := s.Full(cached); err == nil || !strings.Contains(err.Error(), "read the member live") {
		t.Fatalf("Full on the cached copy: %v", err)
	}
}

// TestSealedMaterialDoesNotMove: whoever can write a member's status (or
// restores an old object) cannot make another member's material, or one
// field as another, open there.
func TestSealedMaterialDoesNotMove(t *testing.T) {
	s := sealer(t, 1)
	victim := member("victim", "1")
	sealed, err := s.Seal(victim, access)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*kobev1.ClusterInstance{
		"another member":                 member("other", "2"),
		"same name, another UID":         member("victim", "2"),
		"same UID, another name":         member("other", "1"),
		"same name and UID, another ns":  func() *kobev1.ClusterInstance { x := member("victim", "1"); x.Namespace = "other"; return x }(),
		"the admin kubeconfig as CA key": func() *kobev1.ClusterInstance { x := member("victim", "1"); return x }(),
	} {
		t.Run(name, func(t *testing.T) {
			m.Status.Access = sealed.DeepCopy()
			if name == "the admin kubeconfig as CA key" {
				m.Status.Access.SealedClientCAKey = sealed.SealedAdminKubeconfig
			}
			if a, err := s.ForLeases(m); err == nil {
				t.Fatalf("opened: %+v", a)
			}
		})
	}
	tampered := victim.DeepCopy()
	tampered.Status.Access = sealed.DeepCopy()
	tampered.Status.Access.SealedClientCAKey[len(tampered.Status.Access.SealedClientCAKey)-1] ^= 1
	if _, err := s.ForLeases(tampered); err == nil {
		t.Fatal("a changed ciphertext opened")
	}
}

func TestOpenRefusals(t *testing.T) {
	s := sealer(t, 1)
	m := member("m", "1")
	if _, err := s.ForLeases(m); !errors.Is(err, memberaccess.ErrNoAccess) {
		t.Fatalf("no material: %v, want ErrNoAccess", err)
	}
	sealed, err := sealer(t, 2).Seal(m, access)
	if err != nil {
		t.Fatal(err)
	}
	m.Status.Access = sealed
	if _, err := s.ForLeases(m); !errors.Is(err, memberaccess.ErrOtherKey) {
		t.Fatalf("another key: %v, want ErrOtherKey", err)
	}
	if _, err := memberaccess.NewSealer([]byte("short")); err == nil {
		t.Fatal("a 5-byte key was taken")
	}
	if _, err := s.Seal(&kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: "no-uid"}}, access); err == nil {
		t.Fatal("sealed for a member without a UID")
	}
	partial := *access
	partial.ClientCAKey = nil
	if _, err := s.Seal(member("m", "1"), &partial); err == nil || !strings.Contains(err.Error(), "client CA key") {
		t.Fatalf("sealing material without a client CA key: %v", err)
	}
}
