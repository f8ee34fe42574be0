package sim_test

import (
	"crypto/x509"
	"net"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/sim"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func member(uid types.UID, spec *kobev1.SimBackendSpec) backend.Member {
	return backend.Member{
		Namespace: "ns", Name: "pool-a-0", UID: uid, Pool: "a", Created: t0,
		Spec: kobev1.ClusterInstanceSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: spec}},
	}
}

func TestReadyAfterTheDelaySinceCreation(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := sim.New(sim.Options{Clock: clk})
	m := member("uid-1", &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: 3 * time.Second}})
	if err := b.Create(t.Context(), m); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, tc := range []struct {
		at   time.Duration
		want backend.State
	}{
		{0, backend.StateProvisioning},
		{2999 * time.Millisecond, backend.StateProvisioning},
		{3 * time.Second, backend.StateReady},
		{time.Hour, backend.StateReady},
	} {
		clk.SetTime(t0.Add(tc.at))
		// A fresh backend stands for a restarted operator or another
		// replica: the verdict must not depend on anything in memory.
		for _, bb := range []*sim.Backend{b, sim.New(sim.Options{Clock: clk})} {
			obs, err := bb.Observe(t.Context(), m)
			if err != nil {
				t.Fatalf("Observe at +%s: %v", tc.at, err)
			}
			if obs.State != tc.want {
				t.Errorf("at +%s: state %s (%s), want %s", tc.at, obs.State, obs.Message, tc.want)
			}
			if (obs.Access != nil) != (tc.want == backend.StateReady) {
				t.Errorf("at +%s: access %v with state %s", tc.at, obs.Access != nil, obs.State)
			}
		}
	}
}

func TestNoSimBlockIsReadyAtOnce(t *testing.T) {
	b := sim.New(sim.Options{Clock: clocktesting.NewFakePassiveClock(t0)})
	obs, err := b.Observe(t.Context(), member("uid-2", nil))
	if err != nil || obs.State != backend.StateReady {
		t.Fatalf("Observe = %s (%s), %v; want Ready", obs.State, obs.Message, err)
	}
}

func TestFailureRateIsDeterministicByUID(t *testing.T) {
	const n = 1000
	uids := make([]types.UID, n)
	for i := range uids {
		uids[i] = uuid.NewUUID()
	}
	clk := clocktesting.NewFakePassiveClock(t0.Add(time.Second))
	for _, pct := range []int32{0, 10, 30, 50, 100} {
		spec := &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: time.Second}, FailurePercent: pct}
		failed := 0
		for _, uid := range uids {
			obs, err := sim.New(sim.Options{Clock: clk}).Observe(t.Context(), member(uid, spec))
			if err != nil {
				t.Fatal(err)
			}
			switch obs.State {
			case backend.StateFailed:
				failed++
			case backend.StateReady:
			default:
				t.Fatalf("failurePercent %d, uid %s: state %s", pct, uid, obs.State)
			}
			if again := sim.Fails(uid, pct); again != (obs.State == backend.StateFailed) {
				t.Fatalf("failurePercent %d, uid %s: Fails says %v, Observe said %s", pct, uid, again, obs.State)
			}
		}
		// Binomial(1000, p): 4.5 standard deviations at p = 0.5 is 71.
		want := int(pct) * n / 100
		if d := failed - want; d < -71 || d > 71 {
			t.Errorf("failurePercent %d: %d of %d failed, want %d +- 71", pct, failed, n, want)
		}
		if (pct == 0 && failed != 0) || (pct == 100 && failed != n) {
			t.Errorf("failurePercent %d: %d of %d failed", pct, failed, n)
		}
		t.Logf("failurePercent %d: %d of %d failed", pct, failed, n)
	}
}

func TestFailsOnlyOnceReadyAfterHasPassed(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	b := sim.New(sim.Options{Clock: clk})
	m := member("uid-3", &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: time.Minute}, FailurePercent: 100})
	if obs, _ := b.Observe(t.Context(), m); obs.State != backend.StateProvisioning {
		t.Fatalf("before readyAfter: %s, want Provisioning", obs.State)
	}
	clk.SetTime(t0.Add(time.Minute))
	if obs, _ := b.Observe(t.Context(), m); obs.State != backend.StateFailed || obs.Access != nil {
		t.Fatalf("after readyAfter: %s (access %v), want Failed without access", obs.State, obs.Access != nil)
	}
}

// TestAccessMintsLeaseCredentials checks the access material as the
// operator uses it: the admin kubeconfig parses and names the endpoint, and a
// lease kubeconfig minted from the client CA carries a certificate that the
// client CA verifies.
func TestAccessMintsLeaseCredentials(t *testing.T) {
	obs, err := sim.New(sim.Options{}).Observe(t.Context(), member("uid-4", nil))
	if err != nil || obs.Access == nil {
		t.Fatalf("Observe: %v, access %v", err, obs.Access)
	}
	a := obs.Access
	if a.Endpoint != sim.Endpoint {
		t.Errorf("endpoint %q, want %q", a.Endpoint, sim.Endpoint)
	}
	admin, err := clientcmd.RESTConfigFromKubeConfig(a.AdminKubeconfig)
	if err != nil {
		t.Fatalf("admin kubeconfig: %v", err)
	}
	if admin.Host != sim.Endpoint || string(admin.CAData) != string(a.CACert) {
		t.Errorf("admin kubeconfig: host %q, CA matches %v", admin.Host, string(admin.CAData) == string(a.CACert))
	}
	verify(t, "admin", admin.CertData, a.ClientCACert)

	exp := metav1.NewTime(time.Now().Add(30 * time.Minute).Truncate(time.Second))
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "lease-0123456789ab", UID: "uid-lease"}}
	l.Spec.Requester.Identity = "bench"
	l.Spec.TTL = &metav1.Duration{Duration: time.Hour}
	l.Status.ExpiresAt = &exp
	l.Status.InstanceRef = &kobev1.ObjectRef{Name: "pool-a-0", UID: "uid-4"}
	bound := metav1.Now()
	held := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: "pool-a-0", UID: "uid-4"},
		Spec: kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: l.Name, UID: l.UID, BoundAt: &bound}}}
	kc, err := leasecreds.Kubeconfig(a, l, held, nil, time.Now())
	if err != nil {
		t.Fatalf("minting a lease kubeconfig: %v", err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatalf("lease kubeconfig: %v", err)
	}
	if cfg.Host != sim.Endpoint {
		t.Errorf("lease kubeconfig server %q, want %q", cfg.Host, sim.Endpoint)
	}
	leaf := verify(t, "lease", cfg.CertData, a.ClientCACert)
	if leaf.Subject.CommonName != leasecreds.CommonName(l) || !leaf.NotAfter.Equal(exp.Time) {
		t.Errorf("lease certificate CN %q NotAfter %s", leaf.Subject.CommonName, leaf.NotAfter)
	}

	// Another member's client CA must not verify this member's certificates.
	other, err := sim.NewAccess()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(other.ClientCACert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("another simulated member's client CA verifies this member's lease certificate")
	}
}

// verify checks that certPEM is a client certificate signed by caPEM.
func verify(t *testing.T, what string, certPEM, caPEM []byte) *x509.Certificate {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatalf("%s certificate: %v", what, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s: client CA does not parse", what)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("%s certificate does not verify against the client CA: %v", what, err)
	}
	return certs[0]
}

// TestEndpointFailsFastOnLoopback checks the choice of endpoint: loopback
// (it never leaves the machine) and refused at once, not after a timeout.
func TestEndpointFailsFastOnLoopback(t *testing.T) {
	u, err := url.Parse(sim.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Fatalf("endpoint host %q is not a loopback address", u.Hostname())
	}
	start := time.Now()
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err == nil {
		_ = conn.Close()
		t.Fatalf("something listens on %s", u.Host)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("dialling %s failed after %s, want at once: %v", u.Host, took, err)
	}
}

func TestDeleteIsGoneAtOnceAndCapabilities(t *testing.T) {
	b := sim.New(sim.Options{})
	gone, err := b.Delete(t.Context(), member("uid-5", nil))
	if !gone || err != nil {
		t.Errorf("Delete = %v, %v; want gone", gone, err)
	}
	c := b.Capabilities()
	if !c.Simulated || c.MaxServers != 1 || c.Scheduling || len(c.KubernetesVersions) != 0 {
		t.Errorf("capabilities %+v", c)
	}
	if b.Type() != kobev1.BackendSim {
		t.Errorf("type %s", b.Type())
	}
}

// TestAccessIsMintedOncePerMember: observing a Ready member again returns
// the material minted the first time; a deleted member's is forgotten.
func TestAccessIsMintedOncePerMember(t *testing.T) {
	b := sim.New(sim.Options{Clock: clocktesting.NewFakePassiveClock(t0)})
	m := member("uid-once", nil)
	first, err := b.Observe(t.Context(), m)
	if err != nil || first.Access == nil {
		t.Fatalf("Observe = %+v, %v; want Ready with access", first, err)
	}
	again, err := b.Observe(t.Context(), m)
	if err != nil || again.Access != first.Access {
		t.Errorf("second Observe minted new access material (%v)", err)
	}
	other, err := b.Observe(t.Context(), member("uid-other", nil))
	if err != nil || string(other.Access.ClientCAKey) == string(first.Access.ClientCAKey) {
		t.Errorf("two members share a client CA key (%v)", err)
	}
	if _, err := b.Delete(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	after, err := b.Observe(t.Context(), m)
	if err != nil || after.Access == first.Access {
		t.Errorf("a deleted member's access material was kept (%v)", err)
	}
}
