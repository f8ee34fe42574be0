package lease

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Whether a member may be bound to a lease. Package binding claims members
// with these checks; the API refuses a lease request whose cleanup mode no
// member could ever serve (CheckCleanupMode) before anything is written.

// ErrCleanupModeUnsupported: the pool's backend cannot prove a member
// destroyed, so a VerifiedDestroy lease is refused before binding, never
// silently downgraded (spec 000).
var ErrCleanupModeUnsupported = errors.New("cleanupMode VerifiedDestroy is not supported by the pool's backend")

// Bindable reports whether a member can be bound now: Ready, bound to no
// lease, not being deleted, and running: neither asked to freeze nor frozen
// or thawing (Running).
func Bindable(inst *kobev1.ClusterInstance) bool {
	return inst.DeletionTimestamp == nil && inst.Spec.LeaseRef == nil && inst.Status.Phase == kobev1.InstanceReady && Running(inst)
}

// Running reports whether a member's processes run and were checked: the
// pool did not ask for it to be frozen, and it is not frozen, or was
// thawed and passed its health check since (the Frozen condition). A
// frozen member's API server answers nothing, so it is never handed out.
func Running(inst *kobev1.ClusterInstance) bool {
	if inst.Spec.Frozen {
		return false
	}
	c := meta.FindStatusCondition(inst.Status.Conditions, kobev1.ConditionFrozen)
	return c == nil || (c.Status == metav1.ConditionFalse && c.Reason == kobev1.ReasonThawed)
}

// CheckCleanupMode refuses a cleanup mode that pool p's backend cannot
// honour, given which backends can prove a member destroyed (verifiable;
// nil: none can). p may be nil (not known yet): then only the lack of any
// verifiable backend refuses, and only members that ServesCleanup may take
// the lease.
func CheckCleanupMode(mode kobev1.CleanupMode, p *kobev1.ClusterPool, verifiable func(kobev1.BackendType) bool) error {
	if mode != kobev1.CleanupVerifiedDestroy {
		return nil
	}
	if verifiable == nil {
		return fmt.Errorf("%w: no backend wired in this operator can prove a member destroyed; use cleanupMode Standard", ErrCleanupModeUnsupported)
	}
	if p != nil && !verifiable(p.Spec.Backend.Type) {
		return fmt.Errorf("%w: pool %s uses backend %q, which cannot prove a member destroyed; use cleanupMode Standard, or a pool whose backend can (local, kubernetes)",
			ErrCleanupModeUnsupported, p.Name, p.Spec.Backend.Type)
	}
	return nil
}

// ServesCleanup reports whether inst may be handed to a lease with cleanup
// mode: a VerifiedDestroy lease takes only members of a verifiable backend
// whose creation manifest is recorded (the list its teardown proves).
func ServesCleanup(inst *kobev1.ClusterInstance, mode kobev1.CleanupMode, verifiable func(kobev1.BackendType) bool) bool {
	if mode != kobev1.CleanupVerifiedDestroy {
		return true
	}
	return verifiable != nil && verifiable(inst.Spec.Backend.Type) && inst.Status.CreationManifest != nil &&
		len(inst.Status.CreationManifest.Resources) > 0
}
