// Package leasecreds mints the kubeconfig a lease holder gets: a client
// certificate signed in-process by the member's client CA, whose subject
// names the lease and its requester and whose NotAfter is the lease's expiry.
// Nothing is written anywhere; a new certificate is minted per request.
package leasecreds

import (
	"fmt"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

// AdminGroup is the group lease certificates carry: a lease holder owns the
// whole member for the lease's lifetime.
const AdminGroup = "system:masters"

// Kubeconfig mints a kubeconfig for a bound lease.
func Kubeconfig(a *backend.Access, l *kobev1.ClusterLease, now time.Time) ([]byte, error) {
	if l.Status.ExpiresAt == nil || l.Status.InstanceRef == nil {
		return nil, fmt.Errorf("lease %s is not bound", l.Name)
	}
	ca, err := pki.LoadCA(a.ClientCACert, a.ClientCAKey)
	if err != nil {
		return nil, fmt.Errorf("loading client CA of %s: %w", l.Status.InstanceRef.Name, err)
	}
	cert, key, err := ca.IssueClient(CommonName(l), []string{AdminGroup}, now.Add(-time.Minute), l.Status.ExpiresAt.Time)
	if err != nil {
		return nil, fmt.Errorf("signing client certificate for lease %s: %w", l.Name, err)
	}
	return pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName:   l.Status.InstanceRef.Name,
		Server:        a.Endpoint,
		CAData:        a.CACert,
		UserName:      l.Name,
		ClientCertPEM: cert,
		ClientKeyPEM:  key,
	})
}

// CommonName is the certificate subject's CN: the lease and its requester,
// which the member's audit log then shows as the user.
func CommonName(l *kobev1.ClusterLease) string {
	if l.Spec.Requester.Identity == "" {
		return "kobe-lease:" + l.Name
	}
	return "kobe-lease:" + l.Name + ":" + l.Spec.Requester.Identity
}
