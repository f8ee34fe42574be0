package memberaccess

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// KeySecretName is the Secret, in the operator's namespace, that holds the
// key sealing every member's access material. Deleting it makes every
// member's material unreadable: the operator recycles those members.
const KeySecretName = "kobe-member-access-key"

// keySecretData is the key's entry in the Secret.
const keySecretData = "key"

// LoadOrCreateKey reads the operator's member access key, creating it when
// it does not exist. Replicas that start together race on the create; the
// loser reads the winner's key.
func LoadOrCreateKey(ctx context.Context, c client.Client, live client.Reader, namespace string) (*Sealer, error) {
	s, err := LoadKey(ctx, live, namespace)
	if !apierrors.IsNotFound(err) {
		return s, err
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("making the member access key: %w", err)
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: KeySecretName, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "kobe", "app.kubernetes.io/component": "member-access-key"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{keySecretData: key},
	}
	err = c.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		return LoadKey(ctx, live, namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("creating Secret %s/%s: %w", namespace, KeySecretName, err)
	}
	return NewSealer(key)
}

// LoadKey reads the operator's member access key; a missing Secret is
// NotFound.
func LoadKey(ctx context.Context, live client.Reader, namespace string) (*Sealer, error) {
	sec := &corev1.Secret{}
	if err := live.Get(ctx, types.NamespacedName{Namespace: namespace, Name: KeySecretName}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, KeySecretName, err)
	}
	s, err := NewSealer(sec.Data[keySecretData])
	if err != nil {
		return nil, fmt.Errorf("member access key in %s/%s: %w", namespace, KeySecretName, err)
	}
	return s, nil
}

// Read returns inst's access material: from status.access, or, for a
// member an older operator built and the instance controller has not moved
// yet, from its access Secret, read live and only if owned by inst's UID.
// full asks for the admin kubeconfig too: inst must then be a live read
// (the cache drops it from status.access).
func Read(ctx context.Context, live client.Reader, s *Sealer, inst *kobev1.ClusterInstance, full bool) (*backend.Access, error) {
	if inst.Status.Access != nil || inst.Status.AccessSecretRef == nil {
		if s == nil {
			return nil, errors.New("this server holds no member access key (memberaccess.LoadOrCreateKey)")
		}
		if full {
			return s.Full(inst)
		}
		return s.ForLeases(inst)
	}
	key := types.NamespacedName{Namespace: inst.Namespace, Name: SecretName(inst.Name)}
	sec := &corev1.Secret{}
	if err := live.Get(ctx, key, sec); err != nil {
		return nil, fmt.Errorf("reading access Secret %s: %w", key, err)
	}
	if !OwnedBy(sec, inst) {
		return nil, fmt.Errorf("access Secret %s does not belong to member %s (uid %s): %w", key, inst.Name, inst.UID, ErrNotOwned)
	}
	return FromSecret(sec)
}

// OwnedBy reports whether a legacy access Secret is owned by inst's UID.
func OwnedBy(sec *corev1.Secret, inst *kobev1.ClusterInstance) bool {
	for _, o := range sec.OwnerReferences {
		if o.UID == inst.UID && o.Kind == "ClusterInstance" {
			return true
		}
	}
	return false
}
