package lease

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// TestMaxExpiry: a lease lasts at most boundAt + ttl + granted extensions,
// each at most the max TTL recorded at creation, whatever its status says.
func TestMaxExpiry(t *testing.T) {
	pool := &kobev1.ClusterPool{Spec: kobev1.ClusterPoolSpec{TTL: &metav1.Duration{Duration: 2 * time.Hour}}}
	mk := func(ttl, maxTTL time.Duration, maxExt *int32, extensions int32) *kobev1.ClusterLease {
		l := mkLease("l", t0, kobev1.LeaseBound)
		if ttl > 0 {
			l.Spec.TTL = &metav1.Duration{Duration: ttl}
		}
		if maxTTL > 0 {
			l.Spec.MaxTTL = &metav1.Duration{Duration: maxTTL}
		}
		l.Spec.MaxExtensions = maxExt
		l.Status.Extensions = extensions
		return &l
	}
	bound := t0.Add(time.Minute)
	cases := []struct {
		name string
		l    *kobev1.ClusterLease
		want time.Time
	}{
		{"not extended", mk(30*time.Minute, time.Hour, ptr.To[int32](2), 0), bound.Add(30 * time.Minute)},
		{"two extensions of the rule's max TTL", mk(30*time.Minute, time.Hour, ptr.To[int32](2), 2), bound.Add(150 * time.Minute)},
		{"extensions forged beyond the cap count as the cap", mk(30*time.Minute, time.Hour, ptr.To[int32](2), 50), bound.Add(150 * time.Minute)},
		{"negative extensions count as none", mk(30*time.Minute, time.Hour, ptr.To[int32](2), -3), bound.Add(30 * time.Minute)},
		{"no extensions allowed", mk(30*time.Minute, time.Hour, ptr.To[int32](0), 2), bound.Add(30 * time.Minute)},
		{"default cap of 2 extensions", mk(30*time.Minute, time.Hour, nil, 5), bound.Add(150 * time.Minute)},
		{"without maxTtl an extension counts the lease's ttl", mk(30*time.Minute, 0, ptr.To[int32](2), 1), bound.Add(60 * time.Minute)},
		{"without ttl the pool's", mk(0, 0, ptr.To[int32](1), 1), bound.Add(4 * time.Hour)},
	}
	for _, tc := range cases {
		if got := MaxExpiry(tc.l, pool, bound); !got.Equal(tc.want) {
			t.Errorf("%s: MaxExpiry = %s, want %s", tc.name, got, tc.want)
		}
	}

	l := mk(30*time.Minute, time.Hour, ptr.To[int32](2), 1)
	forged := metav1.NewTime(bound.Add(100 * time.Hour))
	l.Status.ExpiresAt = &forged
	if !CapExpiry(l, pool, bound) || !l.Status.ExpiresAt.Equal(ptr.To(metav1.NewTime(bound.Add(90*time.Minute)))) {
		t.Fatalf("forged expiresAt capped to %s, want boundAt+90m", l.Status.ExpiresAt)
	}
	earlier := metav1.NewTime(bound.Add(10 * time.Minute))
	l.Status.ExpiresAt = &earlier
	if CapExpiry(l, pool, bound) || !l.Status.ExpiresAt.Equal(&earlier) {
		t.Fatalf("an expiry within the limit was changed to %s", l.Status.ExpiresAt)
	}
	l.Status.ExpiresAt = nil
	if CapExpiry(l, pool, bound) || l.Status.ExpiresAt != nil {
		t.Fatal("a missing expiresAt was set")
	}
}
