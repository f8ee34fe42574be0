package lease

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// ExtensionCap is the longest single extension of l: the max TTL of the
// rule it was created under (spec.maxTtl, written once by the API), else
// its own TTL.
func ExtensionCap(l *kobev1.ClusterLease, pool *kobev1.ClusterPool) time.Duration {
	if l.Spec.MaxTTL != nil && l.Spec.MaxTTL.Duration > 0 {
		return l.Spec.MaxTTL.Duration
	}
	return TTL(l, pool)
}

// MaxExpiry is the latest l can last once bound at boundAt (the member's
// write-once record of the bind, not the lease's status): boundAt + its
// TTL + one ExtensionCap per granted extension, at most MaxExtensions. The
// status is a copy anyone with clusterleases/status may write; a later
// status.expiresAt must not lengthen access.
func MaxExpiry(l *kobev1.ClusterLease, pool *kobev1.ClusterPool, boundAt time.Time) time.Time {
	n := min(max(l.Status.Extensions, 0), max(MaxExtensions(l), 0))
	return boundAt.Add(TTL(l, pool) + time.Duration(n)*ExtensionCap(l, pool))
}

// CapExpiry lowers l's status.expiresAt to MaxExpiry in memory and reports
// whether it did. A missing expiresAt is left to the bind to set.
func CapExpiry(l *kobev1.ClusterLease, pool *kobev1.ClusterPool, boundAt time.Time) bool {
	limit := MaxExpiry(l, pool, boundAt)
	if l.Status.ExpiresAt == nil || !l.Status.ExpiresAt.After(limit) {
		return false
	}
	capped := metav1.NewTime(limit.UTC())
	l.Status.ExpiresAt = &capped
	return true
}
