// Package memberaccess keeps a member's access material (endpoint, CAs, the
// client CA key and the operator's admin kubeconfig) in the member's own
// status.access, its private parts sealed with the operator's key (Sealer),
// so that every operator replica can mint per-lease credentials, nothing
// important lives only in memory, and the material is written once and
// deleted with the member: no Secret per member to create and delete (two
// API writes of each member's life). Members built by an older operator
// kept it in a Secret of their own (SecretName); the instance controller
// moves it. It must not import controllers or the HTTP API.
package memberaccess

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// Keys of a legacy access Secret.
const (
	KeyEndpoint        = "endpoint"
	KeyCACert          = "ca.crt"
	KeyClientCACert    = "client-ca.crt"
	KeyClientCAKey     = "client-ca.key"
	KeyAdminKubeconfig = "admin.kubeconfig"
)

// SecretName is the name of a member's legacy access Secret.
func SecretName(instanceName string) string { return instanceName + "-access" }

// LegacySecret renders the access Secret an older operator wrote for an
// instance, owned by it: what the move to status.access reads.
func LegacySecret(inst *kobev1.ClusterInstance, a *backend.Access) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SecretName(inst.Name),
			Namespace: inst.Namespace,
			Labels: map[string]string{
				kobev1.LabelInstance: inst.Name,
				kobev1.LabelPool:     inst.Spec.PoolRef.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kobev1.GroupVersion.String(),
				Kind:       "ClusterInstance",
				Name:       inst.Name,
				UID:        inst.UID,
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			KeyEndpoint:        []byte(a.Endpoint),
			KeyCACert:          a.CACert,
			KeyClientCACert:    a.ClientCACert,
			KeyClientCAKey:     a.ClientCAKey,
			KeyAdminKubeconfig: a.AdminKubeconfig,
		},
	}
}

// IsAccessSecret reports whether s is a member's access Secret: labelled
// with its member and owned by a ClusterInstance.
func IsAccessSecret(s *corev1.Secret) bool {
	if s.Labels[kobev1.LabelInstance] == "" {
		return false
	}
	for _, o := range s.OwnerReferences {
		if o.Kind == "ClusterInstance" && o.APIVersion == kobev1.GroupVersion.String() {
			return true
		}
	}
	return false
}

// FromSecret reads a legacy access Secret back; it fails when a key is
// missing. Read the Secret live: the operator's cache holds it without the
// admin kubeconfig.
func FromSecret(s *corev1.Secret) (*backend.Access, error) {
	a := &backend.Access{
		Endpoint:        string(s.Data[KeyEndpoint]),
		CACert:          s.Data[KeyCACert],
		ClientCACert:    s.Data[KeyClientCACert],
		ClientCAKey:     s.Data[KeyClientCAKey],
		AdminKubeconfig: s.Data[KeyAdminKubeconfig],
	}
	for k, v := range map[string][]byte{KeyEndpoint: []byte(a.Endpoint), KeyCACert: a.CACert, KeyClientCACert: a.ClientCACert, KeyClientCAKey: a.ClientCAKey, KeyAdminKubeconfig: a.AdminKubeconfig} {
		if len(v) == 0 {
			return nil, fmt.Errorf("access secret %s/%s has no %q", s.Namespace, s.Name, k)
		}
	}
	return a, nil
}
