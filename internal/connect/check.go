package connect

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Refusal is why a connect request is not forwarded: an HTTP status, a
// wire reason and text safe to show the caller.
type Refusal struct {
	Code    int
	Reason  string
	Message string
	Detail  string
}

func (r *Refusal) Error() string { return r.Message + ": " + r.Detail }

func refuse(code int, reason, msg, detail string, args ...any) *Refusal {
	return &Refusal{Code: code, Reason: reason, Message: msg, Detail: fmt.Sprintf(detail, args...)}
}

// mintSkew is how long before a bind a certificate minted for it may start:
// leasecreds back-dates NotBefore by a minute, and boundAt is truncated to
// the second.
const mintSkew = 2 * time.Minute

// SplitPath splits the escaped path of a connect request,
// /connect/<lease>[/<member path>], into the lease's name and the member's
// path (escaped, "/" when empty). It refuses what could make the lease or
// the member's path mean something else than it says: a lease segment that
// is not a valid object name (encoded separators included), and dot
// segments or empty segments, encoded or not, in the member's path.
func SplitPath(escaped string) (name, rest string, r *Refusal) {
	tail, ok := strings.CutPrefix(escaped, leasecreds.ConnectPrefix)
	if !ok {
		return "", "", refuse(http.StatusNotFound, wire.ReasonNotFound, "not found", "connect paths are %s<lease>/...", leasecreds.ConnectPrefix)
	}
	name, rest, _ = strings.Cut(tail, "/")
	rest = "/" + rest
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", refuse(http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "%q is not a lease name: %s", name, strings.Join(errs, "; "))
	}
	plain, err := url.PathUnescape(rest)
	if err != nil {
		return "", "", refuse(http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "the path is not validly escaped")
	}
	// path.Clean keeps a trailing slash off; the member's paths may end
	// with one (kubectl's discovery does not, but proxies may).
	clean := path.Clean(plain)
	if strings.HasSuffix(plain, "/") && clean != "/" {
		clean += "/"
	}
	if clean != plain || strings.Contains(plain, "\\") {
		return "", "", refuse(http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "the path under %s%s must be clean: no dot or empty segments", leasecreds.ConnectPrefix, name)
	}
	return name, rest, nil
}

// CheckLease decides, from the operator's cache, whether lease l may reach
// inst (nil: not found) now: l is Bound to inst (UID), inst's write-once
// leaseRef names l, inst is not being deleted and is reached in Proxy
// mode, and now is before leasecreds.NotAfter, so that a status.expiresAt
// written later than the bind allows does not lengthen access.
func CheckLease(l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, pl *kobev1.ClusterPool, now time.Time) *Refusal {
	if !lease.IsActive(l) {
		return refuse(http.StatusGone, wire.ReasonLeaseEnded, "lease ended", "lease %s is %s; request a new lease", l.Name, l.Status.Phase)
	}
	// The member's write-once leaseRef is the bind's record; the lease's
	// status is a copy, written after the API answered, so a caller using
	// its kubeconfig at once may find it not yet there. Without the copy,
	// inst is the member that names l (memberOf).
	ref := l.Status.InstanceRef
	if inst == nil || !binding.Names(inst, l) {
		if ref == nil {
			return refuse(http.StatusConflict, wire.ReasonLeaseNotBound, "lease not bound", "lease %s holds no member yet", l.Name)
		}
		return refuse(http.StatusConflict, wire.ReasonLeaseNotBound, "lease not bound", "lease %s's member no longer holds it", l.Name)
	}
	if ref != nil && (l.Status.Phase != kobev1.LeaseBound || inst.UID != ref.UID) {
		return refuse(http.StatusConflict, wire.ReasonLeaseNotBound, "lease not bound", "lease %s's member no longer holds it", l.Name)
	}
	if inst.DeletionTimestamp != nil {
		return refuse(http.StatusServiceUnavailable, wire.ReasonMemberUnavailable, "member unavailable", "lease %s's member is being deleted", l.Name)
	}
	if pool.MemberAccessMode(inst) != kobev1.AccessProxy {
		return refuse(http.StatusForbidden, wire.ReasonForbidden, "forbidden", "lease %s's member is reached directly, not through kobe; use the kubeconfig the lease returned", l.Name)
	}
	if end := leasecreds.NotAfter(l, inst, pl); !now.Before(end) {
		return refuse(http.StatusGone, wire.ReasonLeaseEnded, "lease ended", "lease %s expired at %s", l.Name, end.UTC().Format(time.RFC3339))
	}
	return nil
}

// VerifyClient checks that chain (the caller's TLS certificates, leaf
// first) is lease l's credential for inst: the leaf chains to clientCAs
// (inst's client CA) for client authentication at now, its common name is
// exactly leasecreds.CommonName(l), and it was minted for this bind (not
// before inst's boundAt). It never says more than "not this lease's".
func VerifyClient(chain []*x509.Certificate, clientCAs *x509.CertPool, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, now time.Time) *Refusal {
	if len(chain) == 0 {
		return refuse(http.StatusUnauthorized, wire.ReasonUnauthorized, "missing credentials", "present the client certificate of the lease's kubeconfig")
	}
	leaf := chain[0]
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots: clientCAs, Intermediates: intermediates, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	notThis := notThisLease(l)
	if err != nil {
		return notThis
	}
	if leaf.Subject.CommonName != leasecreds.CommonName(l) {
		return notThis
	}
	if leaf.NotBefore.Before(binding.BoundAt(inst, l).Add(-mintSkew)) {
		return notThis
	}
	return nil
}

// notThisLease is the refusal of a certificate that is not l's.
func notThisLease(l *kobev1.ClusterLease) *Refusal {
	return refuse(http.StatusForbidden, wire.ReasonForbidden, "forbidden", "the client certificate is not lease %s's, or has expired; use the kubeconfig the lease returned", l.Name)
}
