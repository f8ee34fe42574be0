//go:build heavy

package ha

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestTTLsAcrossFailover: leases with a short TTL, handed out by both
// replicas, carry certificates whose NotAfter is the lease's expiry. The
// leader is SIGKILLed two seconds before they expire; the other replica
// takes over and ends them, and their members are destroyed, within the
// leader-election lease duration plus a few seconds of the expiry. While
// nobody leads, the surviving replica mints no kubeconfig for an expired
// lease. The delays are measured and logged (docs/ha.md quotes them).
func TestTTLsAcrossFailover(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	lead, follow := c.leader(t)
	c.createSimPool(t, "ttl", 4, 0)
	c.waitPoolReady(t, "ttl", 4)

	const ttl = 20 * time.Second
	type handedOut struct {
		id, member string
		memberUID  types.UID
		expires    time.Time
	}
	var leases []handedOut
	for _, i := range []int{lead, follow, follow} {
		code, b := c.call(t, i, http.MethodPost, "/v1/leases", c.token, wire.CreateLeaseRequest{Pool: "ttl", TTL: ttl.String()})
		var l wire.Lease
		if err := json.Unmarshal(b, &l); err != nil || code != http.StatusCreated || l.Phase != wire.PhaseBound || l.ExpiresAt == nil {
			t.Fatalf("POST /v1/leases on r%d answered %d: %s", i, code, b)
		}
		notAfter := certNotAfter(t, l.Kubeconfig)
		if !notAfter.Equal(*l.ExpiresAt) {
			t.Errorf("lease %s: certificate NotAfter %s, answer's expires_at %s", l.ID, notAfter, l.ExpiresAt)
		}
		// The stored expiry, once the hand-out is recorded, is the same.
		testenv.Eventually(t, 30*time.Second, "lease "+l.ID+" to be recorded Bound", func() error {
			obj := c.lease(t, l.ID)
			if obj.Status.Phase != kobev1.LeaseBound || obj.Status.ExpiresAt == nil {
				return fmt.Errorf("status %+v", obj.Status)
			}
			if !obj.Status.ExpiresAt.Time.Equal(notAfter) {
				t.Fatalf("lease %s: status.expiresAt %s, certificate NotAfter %s", l.ID, obj.Status.ExpiresAt.Time, notAfter)
			}
			leases = append(leases, handedOut{id: l.ID, member: obj.Status.InstanceRef.Name, memberUID: obj.Status.InstanceRef.UID, expires: notAfter})
			return nil
		})
	}

	first := leases[0].expires
	for _, l := range leases[1:] {
		if l.expires.Before(first) {
			first = l.expires
		}
	}
	killAt := first.Add(-2 * time.Second)
	if wait := time.Until(killAt); wait > 0 {
		time.Sleep(wait) // a moment on the clock, not a wait for a state
	} else {
		t.Fatalf("the hand-outs took until %s past the planned kill", -wait)
	}
	c.replica(lead).Kill()
	killed := time.Now()
	t.Logf("killed the leader r%d %s before the first expiry", lead, first.Sub(killed).Round(time.Millisecond))

	// Once expired, and before any replica can have ended the leases
	// (nobody leads yet), the survivor mints no kubeconfig for them.
	if wait := time.Until(first.Add(500 * time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	for _, l := range leases {
		if time.Now().Before(l.expires) {
			continue
		}
		code, b := c.call(t, follow, http.MethodGet, "/v1/leases/"+l.id, c.token, nil)
		var got wire.Lease
		if err := json.Unmarshal(b, &got); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s after its expiry answered %d: %s", l.id, code, b)
		}
		if got.Kubeconfig != "" {
			t.Errorf("GET %s on r%d, %s after its expiry (phase %s), minted a kubeconfig valid until %s",
				l.id, follow, time.Since(l.expires).Round(time.Millisecond), got.Phase, certNotAfter(t, got.Kubeconfig))
		}
	}

	// Measure: the new leader's takeover, and each member's destruction
	// after its lease's expiry.
	bound := c.timings.leaseDuration + c.timings.retryPeriod + 15*time.Second
	var tookOver time.Time
	gone := map[string]time.Time{}
	testenv.Eventually(t, bound+30*time.Second, "the survivor to lead and every member to be destroyed", func() error {
		now := time.Now()
		if tookOver.IsZero() && c.replica(follow).LogContains(acquiredMarker) {
			tookOver = now
		}
		for _, l := range leases {
			if _, ok := gone[l.id]; ok {
				continue
			}
			m := &kobev1.ClusterInstance{}
			err := suite.env.Client.Get(t.Context(), types.NamespacedName{Namespace: c.ns, Name: l.member}, m)
			if apierrors.IsNotFound(err) || (err == nil && m.UID != l.memberUID) {
				gone[l.id] = now
				continue
			}
			if err != nil {
				return err
			}
		}
		if len(gone) < len(leases) || tookOver.IsZero() {
			return fmt.Errorf("%d of %d members destroyed; survivor leads: %t", len(gone), len(leases), !tookOver.IsZero())
		}
		return nil
	})
	t.Logf("failover: the survivor r%d led %s after the kill (leader-election lease duration %s, retry period %s)",
		follow, tookOver.Sub(killed).Round(100*time.Millisecond), c.timings.leaseDuration, c.timings.retryPeriod)
	for _, l := range leases {
		delay := gone[l.id].Sub(l.expires)
		t.Logf("lease %s: member %s destroyed %s after its expiry", l.id, l.member, delay.Round(100*time.Millisecond))
		if delay > bound {
			t.Errorf("lease %s: member destroyed %s after expiry, more than %s", l.id, delay, bound)
		}
		obj := c.lease(t, l.id)
		if obj.Status.Phase != kobev1.LeaseExpired {
			t.Errorf("lease %s ended %s, want Expired", l.id, obj.Status.Phase)
		}
	}
}

// lease reads a lease from the API server.
func (c *cluster) lease(t *testing.T, id string) *kobev1.ClusterLease {
	t.Helper()
	l := &kobev1.ClusterLease{}
	if err := suite.env.Client.Get(t.Context(), types.NamespacedName{Namespace: c.ns, Name: id}, l); err != nil {
		t.Fatalf("reading lease %s: %v", id, err)
	}
	return l
}

// certNotAfter returns the NotAfter of a kubeconfig's client certificate.
func certNotAfter(t *testing.T, kubeconfig string) time.Time {
	t.Helper()
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		t.Fatalf("parsing kubeconfig: %v", err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.AuthInfos[ctx.AuthInfo] == nil {
		t.Fatalf("kubeconfig has no current user")
	}
	block, _ := pem.Decode(cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData)
	if block == nil {
		t.Fatalf("kubeconfig user has no client certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.NotAfter
}
