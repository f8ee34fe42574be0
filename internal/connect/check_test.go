package connect

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
)

func TestSplitPath(t *testing.T) {
	tests := []struct {
		path, name, rest string
		code             int
	}{
		{path: "/connect/lease-a/api", name: "lease-a", rest: "/api"},
		{path: "/connect/lease-a", name: "lease-a", rest: "/"},
		{path: "/connect/lease-a/", name: "lease-a", rest: "/"},
		{path: "/connect/lease-a/api/v1/namespaces/default/pods/p/exec", name: "lease-a", rest: "/api/v1/namespaces/default/pods/p/exec"},
		{path: "/connect/lease-a/apis/apps/v1/", name: "lease-a", rest: "/apis/apps/v1/"},
		{path: "/connect/lease-a/api/v1/namespaces/a%20b", name: "lease-a", rest: "/api/v1/namespaces/a%20b"},
		{path: "/connect/", code: http.StatusBadRequest},
		{path: "/connect/lease-a/../lease-b/api", code: http.StatusBadRequest},
		{path: "/connect/lease-a/./api", code: http.StatusBadRequest},
		{path: "/connect/lease-a/api/..", code: http.StatusBadRequest},
		{path: "/connect/lease-a//api", code: http.StatusBadRequest},
		{path: "/connect/lease-a%2F..%2Flease-b/api", code: http.StatusBadRequest},
		{path: "/connect/lease-a/api%2F..%2F..%2Flease-b", code: http.StatusBadRequest},
		{path: "/connect/lease-a/%2e%2e/lease-b", code: http.StatusBadRequest},
		{path: "/connect/lease-a/api%5C..%5Capi", code: http.StatusBadRequest},
		{path: "/connect/lease-a/api%zz", code: http.StatusBadRequest},
		{path: "/connect/lease-a:lease-b/api", code: http.StatusBadRequest},
		{path: "/connect/LEASE-A/api", code: http.StatusBadRequest},
		{path: "/connect/..", code: http.StatusBadRequest},
		{path: "/other/lease-a/api", code: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			name, rest, r := SplitPath(tt.path)
			switch {
			case tt.code != 0 && (r == nil || r.Code != tt.code):
				t.Fatalf("SplitPath(%q) = %q %q %v, want a %d refusal", tt.path, name, rest, r, tt.code)
			case tt.code == 0 && (r != nil || name != tt.name || rest != tt.rest):
				t.Fatalf("SplitPath(%q) = %q %q %v, want %q %q", tt.path, name, rest, r, tt.name, tt.rest)
			}
		})
	}
}

// now is the wall clock (truncated): the test CAs are minted valid from
// time.Now(), so a fixed date would turn the certificate cases into a time bomb.
var now = time.Now().UTC().Truncate(time.Second)

// bound is lease-a bound at now-10m for 30m to member m-a, reached through
// the proxy.
func bound() (*kobev1.ClusterLease, *kobev1.ClusterInstance) {
	boundAt := metav1.NewTime(now.Add(-10 * time.Minute))
	expires := metav1.NewTime(boundAt.Add(30 * time.Minute))
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "lease-a", Namespace: "ns", UID: "lease-uid", CreationTimestamp: boundAt},
		Spec:       kobev1.ClusterLeaseSpec{Pool: "p", TTL: &metav1.Duration{Duration: 30 * time.Minute}, Requester: kobev1.Requester{Identity: "ci"}},
		Status: kobev1.ClusterLeaseStatus{
			Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: "m-a", UID: "member-uid"},
			BoundAt: &boundAt, ExpiresAt: &expires,
		},
	}
	inst := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "m-a", Namespace: "ns", UID: "member-uid"},
		Spec: kobev1.ClusterInstanceSpec{
			Access:   &kobev1.AccessSpec{Mode: kobev1.AccessProxy},
			LeaseRef: &kobev1.LeaseBinding{Name: "lease-a", UID: "lease-uid", BoundAt: &boundAt},
		},
	}
	return l, inst
}

func TestCheckLease(t *testing.T) {
	tests := []struct {
		name   string
		change func(*kobev1.ClusterLease, *kobev1.ClusterInstance) *kobev1.ClusterInstance
		code   int
	}{
		{"bound, unexpired, held", func(_ *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance { return i }, 0},
		{"released", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status.Phase = kobev1.LeaseReleased
			return i
		}, http.StatusGone},
		{"expired", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status.Phase = kobev1.LeaseExpired
			return i
		}, http.StatusGone},
		{"being deleted", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.DeletionTimestamp = &metav1.Time{Time: now}
			return i
		}, http.StatusGone},
		{"pending", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status.Phase, l.Status.InstanceRef = kobev1.LeasePending, nil
			return nil
		}, http.StatusConflict},
		{"no status copy yet, its member names it", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status = kobev1.ClusterLeaseStatus{}
			return i
		}, 0},
		{"no status copy yet, still past the bind's end", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status = kobev1.ClusterLeaseStatus{}
			i.Spec.LeaseRef.BoundAt = &metav1.Time{Time: now.Add(-31 * time.Minute)}
			return i
		}, http.StatusGone},
		{"no status copy yet, the member names another lease", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status = kobev1.ClusterLeaseStatus{}
			i.Spec.LeaseRef.UID = "other-lease"
			return i
		}, http.StatusConflict},
		{"status names a member, but says Pending", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status.Phase = kobev1.LeasePending
			return i
		}, http.StatusConflict},
		{"past its expiry, still Bound", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			l.Status.ExpiresAt = &metav1.Time{Time: now}
			return i
		}, http.StatusGone},
		{"a forged later expiry does not outlast the bind", func(l *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			i.Spec.LeaseRef.BoundAt = &metav1.Time{Time: now.Add(-31 * time.Minute)}
			l.Status.ExpiresAt = &metav1.Time{Time: now.Add(10 * time.Hour)}
			return i
		}, http.StatusGone},
		{"member gone", func(_ *kobev1.ClusterLease, _ *kobev1.ClusterInstance) *kobev1.ClusterInstance { return nil }, http.StatusConflict},
		{"member rebound to another lease", func(_ *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			i.Spec.LeaseRef.UID = "other-lease"
			return i
		}, http.StatusConflict},
		{"member released", func(_ *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			i.Spec.LeaseRef = nil
			return i
		}, http.StatusConflict},
		{"a member of the same name, recreated", func(_ *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			i.UID = "new-member-uid"
			return i
		}, http.StatusConflict},
		{"member being deleted", func(_ *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			i.DeletionTimestamp = &metav1.Time{Time: now}
			return i
		}, http.StatusServiceUnavailable},
		{"member reached directly", func(_ *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			i.Spec.Access = &kobev1.AccessSpec{Mode: kobev1.AccessDirect}
			return i
		}, http.StatusForbidden},
		{"member from before access modes (Direct)", func(_ *kobev1.ClusterLease, i *kobev1.ClusterInstance) *kobev1.ClusterInstance {
			i.Spec.Access = nil
			return i
		}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, inst := bound()
			inst = tt.change(l, inst)
			r := CheckLease(l, inst, nil, now)
			switch {
			case tt.code == 0 && r != nil:
				t.Fatalf("refused: %v", r)
			case tt.code != 0 && (r == nil || r.Code != tt.code):
				t.Fatalf("got %v, want a %d refusal", r, tt.code)
			}
		})
	}
}

func TestVerifyClient(t *testing.T) {
	l, inst := bound()
	memberCA, err := pki.NewCA("member-client-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("other-client-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(memberCA.Cert)
	issue := func(ca *pki.CA, cn string, notBefore, notAfter time.Time) []*x509.Certificate {
		t.Helper()
		c, k, err := ca.IssueClient(cn, []string{leasecreds.AdminGroup}, notBefore, notAfter)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return []*x509.Certificate{leaf}
	}
	cn := leasecreds.CommonName(l)
	minted := now.Add(-9 * time.Minute)
	tests := []struct {
		name  string
		chain []*x509.Certificate
		code  int
	}{
		{"the lease's certificate", issue(memberCA, cn, minted, now.Add(20*time.Minute)), 0},
		{"no certificate", nil, http.StatusUnauthorized},
		{"another member's CA", issue(otherCA, cn, minted, now.Add(20*time.Minute)), http.StatusForbidden},
		{"another lease's name", issue(memberCA, "kobe-lease:lease-b:ci", minted, now.Add(20*time.Minute)), http.StatusForbidden},
		{"the name without the requester", issue(memberCA, "kobe-lease:lease-a", minted, now.Add(20*time.Minute)), http.StatusForbidden},
		{"expired", issue(memberCA, cn, minted, now.Add(-time.Second)), http.StatusForbidden},
		{"minted before this bind", issue(memberCA, cn, now.Add(-13*time.Minute), now.Add(20*time.Minute)), http.StatusForbidden},
		{"the member's CA itself", []*x509.Certificate{memberCA.Cert}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := VerifyClient(tt.chain, roots, l, inst, now)
			switch {
			case tt.code == 0 && r != nil:
				t.Fatalf("refused: %v", r)
			case tt.code != 0 && (r == nil || r.Code != tt.code):
				t.Fatalf("got %v, want a %d refusal", r, tt.code)
			}
		})
	}
}
