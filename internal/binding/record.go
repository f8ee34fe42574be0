package binding

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// The record of a bind (doc.go's protocol), read and written in memory: the
// member's write-once leaseRef, which alone makes a bind, and the lease's
// status copy of it. Nothing here reads or writes the API server; whether a
// member may be bound at all is package lease's (Bindable,
// CheckCleanupMode, ServesCleanup).

// SetMemberBinding writes the member side of a binding into inst: the lease
// reference with the moment the bind takes effect, the lease label, and the
// lease as controller owner so that deleting the pool does not take a member
// in use with it.
func SetMemberBinding(inst *kobev1.ClusterInstance, l *kobev1.ClusterLease, boundAt time.Time) {
	inst.Spec.LeaseRef = &kobev1.LeaseBinding{Name: l.Name, UID: l.UID, BoundAt: ptr.To(metav1.NewTime(boundAt.UTC().Truncate(time.Second))),
		CleanupMode: l.Spec.CleanupMode}
	if inst.Labels == nil {
		inst.Labels = map[string]string{}
	}
	inst.Labels[kobev1.LabelLease] = l.Name
	owners := make([]metav1.OwnerReference, 0, len(inst.OwnerReferences)+1)
	for _, o := range inst.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			continue
		}
		owners = append(owners, o)
	}
	owners = append(owners, metav1.OwnerReference{
		APIVersion: kobev1.GroupVersion.String(), Kind: "ClusterLease",
		Name: l.Name, UID: l.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
	})
	inst.OwnerReferences = owners
}

// Names reports whether inst's write-once leaseRef names l: the member's
// side of a bind, which alone makes the bind.
func Names(inst *kobev1.ClusterInstance, l *kobev1.ClusterLease) bool {
	return inst.Spec.LeaseRef != nil && inst.Spec.LeaseRef.UID != "" && inst.Spec.LeaseRef.UID == l.UID
}

// BoundAt is when inst's bind to l took effect: its leaseRef.boundAt, else
// (a member bound before boundAt was recorded) the lease's creation, which
// errs towards an earlier expiry.
func BoundAt(inst *kobev1.ClusterInstance, l *kobev1.ClusterLease) time.Time {
	if ref := inst.Spec.LeaseRef; ref != nil && ref.BoundAt != nil {
		return ref.BoundAt.Time
	}
	return l.CreationTimestamp.Time
}

// RecordBound writes in memory the lease's copy of a bind that inst
// confirms (Names): phase Bound, instanceRef, boundAt, expiresAt = boundAt +
// ttl, and the Bound condition. The caller persists it with a fenced status
// write; a lease already Bound to inst keeps its expiry (and extensions).
func RecordBound(l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, ttl time.Duration) {
	ref := &kobev1.ObjectRef{Name: inst.Name, UID: inst.UID}
	if l.Status.Phase == kobev1.LeaseBound && l.Status.InstanceRef != nil && *l.Status.InstanceRef == *ref && l.Status.ExpiresAt != nil {
		return
	}
	at := metav1.NewTime(BoundAt(inst, l).UTC())
	expires := metav1.NewTime(at.Add(ttl))
	l.Status.Phase = kobev1.LeaseBound
	l.Status.InstanceRef = ref
	l.Status.BoundAt = &at
	l.Status.ExpiresAt = &expires
	l.Status.QueuePosition = 0
	l.Status.ObservedGeneration = l.Generation
	meta.SetStatusCondition(&l.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionBound, Status: metav1.ConditionTrue, Reason: kobev1.ReasonBound,
		Message: fmt.Sprintf("bound to %s", inst.Name), ObservedGeneration: l.Generation, LastTransitionTime: at,
	})
}

// Record picks, among members, the one that is l's bind: the member its
// status names when that member names l back, else (no status copy yet) the
// only member that names l. Two members naming l (a claim the API server
// applied after its binder gave up) with no status copy to choose between
// them give nil: the lease controller records the earliest (Elect) and the
// other is recycled.
func Record(members []kobev1.ClusterInstance, l *kobev1.ClusterLease) *kobev1.ClusterInstance {
	var found *kobev1.ClusterInstance
	n := 0
	for i := range members {
		m := &members[i]
		if !Names(m, l) {
			continue
		}
		if ref := l.Status.InstanceRef; ref != nil && ref.UID == m.UID {
			return m
		}
		found = m
		n++
	}
	if l.Status.InstanceRef != nil || n != 1 {
		return nil
	}
	return found
}

// Elect picks, among members, the one a lease's status copy should name
// when several name l: the earliest bind, then the first by name. It is nil
// when none names l.
func Elect(members []kobev1.ClusterInstance, l *kobev1.ClusterLease) *kobev1.ClusterInstance {
	var named []*kobev1.ClusterInstance
	for i := range members {
		if Names(&members[i], l) {
			named = append(named, &members[i])
		}
	}
	if len(named) == 0 {
		return nil
	}
	return slices.MinFunc(named, func(a, b *kobev1.ClusterInstance) int {
		if c := BoundAt(a, l).Compare(BoundAt(b, l)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// Unbind turns a lease whose status names a member that does not name it
// back into a queued one, in memory; the caller persists it with a fenced
// status write.
func Unbind(l *kobev1.ClusterLease, now time.Time) {
	l.Status.Phase = kobev1.LeasePending
	l.Status.InstanceRef = nil
	l.Status.BoundAt = nil
	l.Status.ExpiresAt = nil
	meta.SetStatusCondition(&l.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionBound, Status: metav1.ConditionFalse, Reason: kobev1.ReasonQueued,
		Message: "waiting for a ready member", ObservedGeneration: l.Generation, LastTransitionTime: metav1.NewTime(now.UTC()),
	})
}

// Consistent reports whether both sides of a bind agree: the lease's status
// names inst and inst's leaseRef names the lease.
func Consistent(l *kobev1.ClusterLease, inst *kobev1.ClusterInstance) bool {
	return l.Status.InstanceRef != nil && inst.UID == l.Status.InstanceRef.UID && Names(inst, l)
}
