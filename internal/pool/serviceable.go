package pool

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Cause says why nothing in a pool can become Ready.
type Cause string

// Causes of an unserviceable pool.
const (
	// CauseDeleting: the pool is being deleted.
	CauseDeleting Cause = "PoolBeingDeleted"
	// CauseBackendUnavailable: the pool reports its backend unavailable
	// (condition Capacity False, reason BackendUnavailable), unable to run
	// its bootstrap Jobs (BootstrapJobsUnsupported), its members'
	// isolation unproven (NetworkPolicyNotEnforced) or its Kubernetes
	// version not built here (VersionUnavailable).
	CauseBackendUnavailable Cause = "BackendUnavailable"
	// CauseQuarantined: the pool is at its cap (scaling.maxClusters, or size
	// for a fixed pool) and every member is Quarantined.
	CauseQuarantined Cause = "PoolQuarantined"
)

// Unserviceable is why a pool cannot serve a lease now or later, for a
// request that would otherwise queue until its queue timeout.
type Unserviceable struct {
	Cause Cause
	// Message is for humans; it names the pool.
	Message string
}

// CheckServiceable decides, from a pool's spec, status and conditions alone,
// whether a new lease could ever be bound in it. It returns nil when the
// pool can serve, at once or after queueing: a pool that is merely empty,
// fully leased or scaling from zero can serve. A Capacity condition written
// for an older generation of the pool is not trusted.
func CheckServiceable(p *kobev1.ClusterPool) *Unserviceable {
	if !p.DeletionTimestamp.IsZero() {
		return &Unserviceable{Cause: CauseDeleting, Message: fmt.Sprintf("pool %q is being deleted", p.Name)}
	}
	if u := HandOutRefusal(p); u != nil {
		return u
	}
	if c := capacity(p); c != nil && (c.Reason == kobev1.ReasonBackendUnavailable || c.Reason == kobev1.ReasonBootstrapJobsUnsupported) {
		what := "the backend of pool %q is unavailable: %s"
		if c.Reason == kobev1.ReasonBootstrapJobsUnsupported {
			what = "pool %q cannot build members in this operator: %s"
		}
		return &Unserviceable{Cause: CauseBackendUnavailable, Message: fmt.Sprintf(what, p.Name, c.Message)}
	}
	st := p.Status
	if limit := memberCap(&p.Spec); st.Quarantined > 0 && st.Quarantined >= limit &&
		st.Ready == 0 && st.Creating == 0 && st.Leased == 0 && st.Recycling == 0 {
		return &Unserviceable{Cause: CauseQuarantined, Message: fmt.Sprintf(
			"pool %q is at its cap of %d members and every member is Quarantined: an administrator must inspect their receipts and retry their cleanup (kobe admin retry-cleanup)", p.Name, limit)}
	}
	return nil
}

// HandOutRefusal is why pool p hands out no member, even one already Ready
// (condition Capacity False): its members' isolation is not proven
// (NetworkPolicyNotEnforced), or its cluster.version cannot be built here
// (VersionUnavailable: a member of another version is no substitute). nil
// when neither. It is the one check both lease creation and binding make,
// so that a queued lease never gets a member that a new one would be
// refused. p may be nil (unknown: no refusal).
func HandOutRefusal(p *kobev1.ClusterPool) *Unserviceable {
	if p == nil {
		return nil
	}
	c := capacity(p)
	switch {
	case c == nil:
		return nil
	case c.Reason == kobev1.ReasonNetworkPolicyNotEnforced, c.Reason == kobev1.ReasonVersionUnavailable:
		return &Unserviceable{Cause: CauseBackendUnavailable, Message: fmt.Sprintf("pool %q hands out no member: %s", p.Name, c.Message)}
	}
	return nil
}

// capacity is p's Capacity condition when False and written for p's
// generation (or one without a generation), else nil.
func capacity(p *kobev1.ClusterPool) *metav1.Condition {
	c := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionCapacity)
	if c == nil || c.Status != metav1.ConditionFalse || (c.ObservedGeneration != 0 && c.ObservedGeneration < p.Generation) {
		return nil
	}
	return c
}

// memberCap is the most members a pool holds: scaling.maxClusters for a
// scaling pool (none when unset), size for a fixed one.
func memberCap(spec *kobev1.ClusterPoolSpec) int32 {
	if s := spec.Scaling; s != nil {
		if s.MaxClusters == nil {
			return 1<<31 - 1
		}
		return *s.MaxClusters
	}
	return fixedSize(spec)
}
