package clusterlease

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// memberLost says whether the member a lease holds is dead or being
// destroyed, and why: recycled by the instance controller (its backend
// reported it Failed or gone while leased, reason InstanceLost), deleted
// by someone, or quarantined. The cache can answer: a member never comes
// back from any of these.
func memberLost(inst *kobev1.ClusterInstance) (bool, string) {
	why := ""
	if c := meta.FindStatusCondition(inst.Status.Conditions, kobev1.ConditionReady); c != nil && c.Message != "" {
		why = ": " + c.Message
	}
	switch {
	case inst.Status.Phase == kobev1.InstanceRecycling || inst.Status.Phase == kobev1.InstanceQuarantined:
		return true, fmt.Sprintf("member %s is %s%s", inst.Name, inst.Status.Phase, why)
	case inst.DeletionTimestamp != nil:
		return true, fmt.Sprintf("member %s is being deleted", inst.Name)
	}
	return false, ""
}

// endLost ends a lease whose member was lost (InstanceLost), recording
// the bind first when the lease's status did not name the member yet, so
// that the lease says which member it lost.
func (r *Reconciler) endLost(ctx context.Context, s *scope, inst *kobev1.ClusterInstance, why string) error {
	if s.lease.Status.InstanceRef == nil || s.lease.Status.InstanceRef.UID != inst.UID {
		s.lease.Status.InstanceRef = &kobev1.ObjectRef{Name: inst.Name, UID: inst.UID}
	}
	return r.end(ctx, s, kobev1.LeaseExpired, kobev1.ReasonInstanceLost, why)
}
