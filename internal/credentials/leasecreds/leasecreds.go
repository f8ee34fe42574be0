// Package leasecreds mints the kubeconfig a lease holder gets: a client
// certificate signed in-process by the member's client CA, whose subject
// names the lease and its requester and whose NotAfter is the lease's expiry,
// never later than the bind's limit (lease.MaxExpiry). Nothing is written
// anywhere; a new certificate is minted per request. In Proxy mode the same
// certificate is presented to kobe's connect proxy (ProxyKubeconfig), which
// verifies it against the member's client CA.
package leasecreds

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// AdminGroup is the group lease certificates carry: a lease holder owns the
// whole member for the lease's lifetime.
const AdminGroup = "system:masters"

// Kubeconfig mints a kubeconfig for lease l bound to inst, whose access is
// a. The caller has confirmed the bind from a live read of inst; it must
// name l (UID). The certificate's NotAfter is l's expiry, capped at
// NotAfter: a status.expiresAt written later than the lease can last (by
// anyone with clusterleases/status) does not lengthen it. pool gives the
// TTL of a lease that sets none; nil when it is gone.
func Kubeconfig(a *backend.Access, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, pool *kobev1.ClusterPool, now time.Time) ([]byte, error) {
	return mint(a, l, inst, pool, now, a.Endpoint, a.CACert)
}

// ProxyKubeconfig is Kubeconfig for a member reached through kobe's connect
// proxy: the server is ProxyServer(base, l) and caPEM (kobe's serving CA;
// nil trusts the system's roots) verifies it. The client certificate is the
// one Kubeconfig mints; the proxy checks it on every request.
func ProxyKubeconfig(a *backend.Access, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, pool *kobev1.ClusterPool, now time.Time, base string, caPEM []byte) ([]byte, error) {
	server, err := ProxyServer(base, l.Name)
	if err != nil {
		return nil, err
	}
	return mint(a, l, inst, pool, now, server, caPEM)
}

// ConnectPrefix is the path under which kobe's API proxies to members:
// ConnectPrefix + <lease name> + the member's own path.
const ConnectPrefix = "/connect/"

// ProxyServer is the server URL of lease leaseName's kubeconfig behind the
// connect base URL base (https://host[:port][/path]).
func ProxyServer(base, leaseName string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("connect URL %q must be https://host[:port][/path]", base)
	}
	return strings.TrimSuffix(base, "/") + ConnectPrefix + leaseName, nil
}

func mint(a *backend.Access, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, pool *kobev1.ClusterPool, now time.Time, server string, caPEM []byte) ([]byte, error) {
	if l.Status.ExpiresAt == nil || l.Status.InstanceRef == nil {
		return nil, fmt.Errorf("lease %s is not bound", l.Name)
	}
	if !binding.Names(inst, l) || l.Status.InstanceRef.Name != inst.Name {
		return nil, fmt.Errorf("member %s does not hold lease %s", inst.Name, l.Name)
	}
	notAfter := NotAfter(l, inst, pool)
	if !notAfter.After(now) {
		return nil, fmt.Errorf("lease %s expired at %s", l.Name, notAfter.UTC().Format(time.RFC3339))
	}
	ca, err := pki.LoadCA(a.ClientCACert, a.ClientCAKey)
	if err != nil {
		return nil, fmt.Errorf("loading client CA of %s: %w", l.Status.InstanceRef.Name, err)
	}
	cert, key, err := ca.IssueClient(CommonName(l), []string{AdminGroup}, now.Add(-time.Minute), notAfter)
	if err != nil {
		return nil, fmt.Errorf("signing client certificate for lease %s: %w", l.Name, err)
	}
	return pki.Kubeconfig(pki.KubeconfigInput{
		ClusterName:   l.Status.InstanceRef.Name,
		Server:        server,
		CAData:        caPEM,
		UserName:      l.Name,
		ClientCertPEM: cert,
		ClientKeyPEM:  key,
	})
}

// NotAfter is when l's access to inst ends: its status.expiresAt, but never
// later than lease.MaxExpiry counted from the member's write-once boundAt.
func NotAfter(l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, pool *kobev1.ClusterPool) time.Time {
	limit := lease.MaxExpiry(l, pool, binding.BoundAt(inst, l))
	if l.Status.ExpiresAt == nil || l.Status.ExpiresAt.After(limit) {
		return limit
	}
	return l.Status.ExpiresAt.Time
}

// commonNamePrefix begins the CN of every lease certificate.
const commonNamePrefix = "kobe-lease:"

// CommonName is the certificate subject's CN: the lease and its requester,
// which the member's audit log then shows as the user.
func CommonName(l *kobev1.ClusterLease) string {
	if l.Spec.Requester.Identity == "" {
		return commonNamePrefix + l.Name
	}
	return commonNamePrefix + l.Name + ":" + l.Spec.Requester.Identity
}

// LeaseName is the name of the lease that cn, a certificate's CN of the
// form CommonName writes, names: what follows "kobe-lease:" up to the next
// ":" (a lease's name, an object name, has none; the identity after it
// may). It reports false for a CN of another form or whose name is not an
// object name. The name says only which lease to check: a certificate is
// that lease's when its CN equals CommonName of the lease read, exactly,
// and it chains to the lease's member's client CA (the connect proxy's
// VerifyClient); anyone can write any CN.
func LeaseName(cn string) (string, bool) {
	rest, ok := strings.CutPrefix(cn, commonNamePrefix)
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, ":")
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", false
	}
	return name, true
}
