package memberaccess

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// Errors of Open: the caller decides whether the member is lost.
var (
	// ErrNoAccess: the member has no access material yet (not Provisioned).
	ErrNoAccess = errors.New("the member has no access material")
	// ErrOtherKey: the material was sealed with a key this operator does not
	// hold (the key Secret was replaced): it cannot be opened, ever.
	ErrOtherKey = errors.New("the member's access material was sealed with another key")
	// ErrNotOwned: a legacy access Secret of the member's name is owned by
	// another object.
	ErrNotOwned = errors.New("the access Secret does not belong to the member")
)

// Fields of the sealed material, part of what each seal is bound to: one
// field's ciphertext does not open as another's.
const (
	fieldClientCAKey     = "clientCAKey"
	fieldAdminKubeconfig = "adminKubeconfig"
	fieldAdminCredential = "adminCredential"
)

// Sealer seals a member's private access material with the operator's key
// and opens it again. Every replica holds the same key (LoadOrCreateKey).
// Each seal is bound to the member's namespace, name and UID: material
// copied into another member's status does not open there.
type Sealer struct {
	id   string
	aead cipher.AEAD
}

// KeySize is the length of the operator's key: AES-256.
const KeySize = 32

// NewSealer returns a Sealer for key (KeySize bytes).
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("the member access key has %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("member access key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("member access key: %w", err)
	}
	sum := sha256.Sum256(key)
	return &Sealer{id: hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// KeyID names the key: the first 16 hex digits of its SHA-256.
func (s *Sealer) KeyID() string { return s.id }

// Seal returns inst's status.access for a: the certificates in the clear,
// the client CA key and the admin kubeconfig sealed.
func (s *Sealer) Seal(inst *kobev1.ClusterInstance, a *backend.Access) (*kobev1.MemberAccess, error) {
	if inst.UID == "" {
		return nil, fmt.Errorf("sealing the access of %s: the member has no UID yet", inst.Name)
	}
	for k, v := range map[string][]byte{"CA certificate": a.CACert, "client CA certificate": a.ClientCACert, "client CA key": a.ClientCAKey, "admin kubeconfig": a.AdminKubeconfig} {
		if len(v) == 0 {
			return nil, fmt.Errorf("the backend's access material of %s has no %s", inst.Name, k)
		}
	}
	key, err := s.seal(inst, fieldClientCAKey, a.ClientCAKey)
	if err != nil {
		return nil, err
	}
	m := &kobev1.MemberAccess{CACert: string(a.CACert), ClientCACert: string(a.ClientCACert), KeyID: s.id, SealedClientCAKey: key}
	if compact, ok := compactAdmin(a.AdminKubeconfig, a.CACert); ok {
		m.SealedAdminCredential, err = s.seal(inst, fieldAdminCredential, compact)
	} else {
		m.SealedAdminKubeconfig, err = s.seal(inst, fieldAdminKubeconfig, a.AdminKubeconfig)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// ForLeases opens what minting a lease's kubeconfig needs: everything but
// the admin kubeconfig, which the operator's cache drops. inst may come
// from the cache.
func (s *Sealer) ForLeases(inst *kobev1.ClusterInstance) (*backend.Access, error) {
	m, err := s.material(inst)
	if err != nil {
		return nil, err
	}
	key, err := s.open(inst, fieldClientCAKey, m.SealedClientCAKey)
	if err != nil {
		return nil, err
	}
	return &backend.Access{
		Endpoint: inst.Status.Endpoint, CACert: []byte(m.CACert), ClientCACert: []byte(m.ClientCACert), ClientCAKey: key,
	}, nil
}

// Full opens all of inst's access material, the admin kubeconfig
// included: read inst live (the cache drops the admin kubeconfig).
func (s *Sealer) Full(inst *kobev1.ClusterInstance) (*backend.Access, error) {
	a, err := s.ForLeases(inst)
	if err != nil {
		return nil, err
	}
	m := inst.Status.Access
	switch {
	case len(m.SealedAdminCredential) > 0:
		compact, err := s.open(inst, fieldAdminCredential, m.SealedAdminCredential)
		if err != nil {
			return nil, err
		}
		if a.AdminKubeconfig, err = openAdminCredential(compact, a.CACert); err != nil {
			return nil, fmt.Errorf("member %s: %w", inst.Name, err)
		}
	case len(m.SealedAdminKubeconfig) > 0:
		if a.AdminKubeconfig, err = s.open(inst, fieldAdminKubeconfig, m.SealedAdminKubeconfig); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("member %s: no admin kubeconfig in status.access (read the member live: the cache drops it)", inst.Name)
	}
	return a, nil
}

func (s *Sealer) material(inst *kobev1.ClusterInstance) (*kobev1.MemberAccess, error) {
	m := inst.Status.Access
	switch {
	case m == nil:
		return nil, fmt.Errorf("member %s: %w", inst.Name, ErrNoAccess)
	case m.KeyID != s.id:
		return nil, fmt.Errorf("member %s (key %q, this operator holds %q; was Secret %s replaced?): %w", inst.Name, m.KeyID, s.id, KeySecretName, ErrOtherKey)
	case inst.Status.Endpoint == "" || m.CACert == "" || m.ClientCACert == "" || len(m.SealedClientCAKey) == 0:
		return nil, fmt.Errorf("member %s: status.access is incomplete", inst.Name)
	}
	return m, nil
}

func (s *Sealer) seal(inst *kobev1.ClusterInstance, field string, plain []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("sealing the access of %s: %w", inst.Name, err)
	}
	return s.aead.Seal(nonce, nonce, plain, boundTo(inst, field)), nil
}

func (s *Sealer) open(inst *kobev1.ClusterInstance, field string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, fmt.Errorf("member %s: sealed %s is too short", inst.Name, field)
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], boundTo(inst, field))
	if err != nil {
		// The key matches (material checked KeyID): the ciphertext was
		// changed, or sealed for another member or field.
		return nil, fmt.Errorf("member %s: sealed %s does not open for this member (uid %s)", inst.Name, field, inst.UID)
	}
	return plain, nil
}

// boundTo is the additional data of a seal: the member's identity and the
// field.
func boundTo(inst *kobev1.ClusterInstance, field string) []byte {
	return []byte("kobe.kunobi.ninja/member-access/v1\x00" + field + "\x00" + inst.Namespace + "\x00" + inst.Name + "\x00" + string(inst.UID))
}

// Publish seals a into inst's status (status.access, status.endpoint), in
// memory: the caller's status write persists it.
func (s *Sealer) Publish(inst *kobev1.ClusterInstance, a *backend.Access) error {
	sealed, err := s.Seal(inst, a)
	if err != nil {
		return err
	}
	inst.Status.Endpoint, inst.Status.Access = a.Endpoint, sealed
	return nil
}
