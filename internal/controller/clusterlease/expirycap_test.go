//go:build integration

package clusterlease_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
)

// TestForgedLaterExpiryIsCapped: a status.expiresAt written
// later than the lease can last (by anyone with clusterleases/status),
// with a forged extension count and boundAt besides, does not keep the
// lease: it ends at boundAt (the member's write-once record) + ttl + the
// extensions its cap allows, each at most its spec.maxTtl.
func TestForgedLaterExpiryIsCapped(t *testing.T) {
	h := start(t)
	h.pool("capped", 0)
	h.member("capped")
	l := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Name: "stretched", Namespace: h.ns},
		Spec: kobev1.ClusterLeaseSpec{Pool: "capped", TTL: &metav1.Duration{Duration: 6 * time.Second},
			MaxTTL: &metav1.Duration{Duration: 3 * time.Second}, MaxExtensions: ptr.To[int32](1)},
	}
	h.must(h.c.Create(t.Context(), l))
	h.eventually(15*time.Second, "the lease to bind", phaseIs(h, "stretched", kobev1.LeaseBound, -1))
	bound := h.get("stretched")
	member := &kobev1.ClusterInstance{}
	h.must(h.c.Get(t.Context(), client.ObjectKey{Namespace: h.ns, Name: bound.Status.InstanceRef.Name}, member))
	limit := binding.BoundAt(member, bound).Add(6*time.Second + 3*time.Second)

	forged := bound.Status.DeepCopy()
	far := metav1.NewTime(time.Now().Add(time.Hour))
	later := metav1.NewTime(time.Now().Add(30 * time.Minute))
	forged.ExpiresAt, forged.BoundAt, forged.Extensions = &far, &later, 5
	h.forge(bound, *forged)

	h.eventually(30*time.Second, "the lease to end at its limit, not the forged expiry", func() error {
		got := h.get("stretched")
		if got.Status.Phase != kobev1.LeaseExpired {
			return fmt.Errorf("phase %s, expiresAt %s (limit %s)", got.Status.Phase, got.Status.ExpiresAt, limit.UTC())
		}
		return nil
	})
	got := h.get("stretched")
	if r := endedBecause(got); r != kobev1.ReasonExpired {
		t.Errorf("ended because %q, want Expired", r)
	}
	if got.Status.ExpiresAt.After(limit) {
		t.Errorf("expiresAt %s left later than the limit %s", got.Status.ExpiresAt, limit)
	}
	// Generous for a busy machine, and an hour short of the forged expiry.
	if ended := got.Status.EndedAt.Time; ended.After(limit.Add(10 * time.Second)) {
		t.Errorf("ended at %s, %s after the limit %s", ended, ended.Sub(limit), limit)
	}
}
