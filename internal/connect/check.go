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
	if r := checkClean(rest, leasecreds.ConnectPrefix+name); r != nil {
		return "", "", r
	}
	return name, rest, nil
}

// RootPaths are the Kubernetes API paths that the proxy also serves at the
// root of kobe's endpoint, each with the paths under it, for clients that
// drop the path of a kubeconfig's server (https://<kobe>/connect/<lease>):
// kubectl proxy without --append-server-path, some SDKs. The lease is the
// one whose client certificate the caller presents (LeaseName). They are
// what kube-apiserver serves to its clients (discovery, resources,
// OpenAPI, version, the ServiceAccount issuer's discovery) and nothing
// kobe's endpoint serves or keeps for itself: not /v1 (the lease API),
// /healthz, /readyz and /livez (kobe's probes: a probe of kobe must never
// be answered by a member), /metrics (never served on this port), nor
// kube-apiserver's administrative /logs, /debug and /flowcontrol. Those
// members' paths stay reachable under /connect/<lease>.
var RootPaths = []string{"/api", "/apis", "/version", "/openapi", "/.well-known/openid-configuration", "/openid/v1/jwks"}

// IsRootPath reports whether escaped, a request's escaped path, is one of
// RootPaths or under one (/api and /api/..., never /apiary). The escaped
// form decides: /%61pi is not /api here, and is not forwarded.
func IsRootPath(escaped string) bool {
	for _, p := range RootPaths {
		if escaped == p || strings.HasPrefix(escaped, p+"/") {
			return true
		}
	}
	return false
}

// IsConnectPath reports whether r's path, plain or escaped, is under
// /connect/: the proxy answers it, forwarding or refusing, and nothing else
// of kobe's endpoint does.
func IsConnectPath(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, leasecreds.ConnectPrefix) || strings.HasPrefix(r.URL.EscapedPath(), leasecreds.ConnectPrefix)
}

// Serves reports whether the proxy answers r: a connect path or a
// Kubernetes API path at the root (IsRootPath). kobe's endpoint routes
// these to the proxy before anything else, so that none falls through to
// the lease API.
func Serves(r *http.Request) bool {
	return IsConnectPath(r) || IsRootPath(r.URL.EscapedPath())
}

// RootPath checks the escaped path of a request at the root of kobe's
// endpoint and returns it as the member's path: one of RootPaths or under
// one, clean as SplitPath requires a member's path to be.
func RootPath(escaped string) (rest string, r *Refusal) {
	if !IsRootPath(escaped) {
		return "", refuse(http.StatusNotFound, wire.ReasonNotFound, "not found", "connect paths are %s<lease>/...", leasecreds.ConnectPrefix)
	}
	if r := checkClean(escaped, ""); r != nil {
		return "", r
	}
	return escaped, nil
}

// checkClean refuses rest, an escaped member path under the prefix under,
// when it is not validly escaped or, unescaped, not clean: dot or empty
// segments, or a backslash.
func checkClean(rest, under string) *Refusal {
	plain, err := url.PathUnescape(rest)
	if err != nil {
		return refuse(http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "the path is not validly escaped")
	}
	// path.Clean keeps a trailing slash off; the member's paths may end
	// with one (kubectl's discovery does not, but proxies may).
	clean := path.Clean(plain)
	if strings.HasSuffix(plain, "/") && clean != "/" {
		clean += "/"
	}
	if clean != plain || strings.Contains(plain, "\\") {
		if under == "" {
			return refuse(http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "the path must be clean: no dot or empty segments")
		}
		return refuse(http.StatusBadRequest, wire.ReasonBadRequest, "bad request", "the path under %s must be clean: no dot or empty segments", under)
	}
	return nil
}

// LeaseOf is the name of the lease whose certificate leaf claims to be
// (leasecreds.LeaseName of its CN), for requests at the root, whose path
// names no lease. The claim is checked as on a connect path: the CN must
// equal the lease's exactly and the certificate chain to its member's
// client CA (VerifyClient). A certificate of another form (a member's
// admin or a node's, any other) is refused here.
func LeaseOf(leaf *x509.Certificate) (string, *Refusal) {
	name, ok := leasecreds.LeaseName(leaf.Subject.CommonName)
	if !ok {
		return "", refuse(http.StatusForbidden, wire.ReasonForbidden, "forbidden",
			"the client certificate is not a lease's; use the kubeconfig the lease returned")
	}
	return name, nil
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
