// Package index registers the cache field indexes kobe's controllers and
// HTTP API look objects up by. Register them once per manager, in main.
package index

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

const (
	// LeasePool indexes ClusterLeases by spec.pool, ended ones included
	// (they are kept for --lease-retention): for what needs the pool's
	// history, such as its demand.
	LeasePool = "spec.pool"
	// ActiveLeasePool indexes the ClusterLeases that have not ended
	// (lease.IsActive) by spec.pool: a pool's queue and its bound leases.
	// A busy pool keeps thousands of ended leases for an hour; reading its
	// queue through LeasePool copied every one of them on each hand-out,
	// lease reconcile and member event.
	ActiveLeasePool = "spec.pool.active"
	// LeaseIdentity indexes ClusterLeases by spec.requester.identity.
	LeaseIdentity = "spec.requester.identity"
	// LeaseInstanceUID indexes ClusterLeases by status.instanceRef.uid: the
	// binder skips a member that any lease's status names (package binding).
	LeaseInstanceUID = "status.instanceRef.uid"
	// InstanceLeaseUID indexes ClusterInstances by spec.leaseRef.uid: the
	// members that name a lease (the record of its bind, package binding).
	InstanceLeaseUID = "spec.leaseRef.uid"
	// InstancePool indexes ClusterInstances by the pool their
	// kobev1.LabelPool label names, so that a pool's members are found
	// without scanning every member of the namespace (as a label selector
	// on the cache does).
	InstancePool = "metadata.labels.pool"
)

// LeaseInstance is the LeaseInstanceUID index function.
func LeaseInstance(o client.Object) []string {
	l, ok := o.(*kobev1.ClusterLease)
	if !ok || l.Status.InstanceRef == nil || l.Status.InstanceRef.UID == "" {
		return nil
	}
	return []string{string(l.Status.InstanceRef.UID)}
}

// InstanceLease is the InstanceLeaseUID index function.
func InstanceLease(o client.Object) []string {
	inst, ok := o.(*kobev1.ClusterInstance)
	if !ok || inst.Spec.LeaseRef == nil || inst.Spec.LeaseRef.UID == "" {
		return nil
	}
	return []string{string(inst.Spec.LeaseRef.UID)}
}

// ActiveLeasePoolName is the ActiveLeasePool index function.
func ActiveLeasePoolName(o client.Object) []string {
	l, ok := o.(*kobev1.ClusterLease)
	if !ok || !lease.IsActive(l) {
		return nil
	}
	return []string{l.Spec.Pool}
}

// InstancePoolName is the InstancePool index: a member's pool label.
func InstancePoolName(o client.Object) []string {
	if name := o.GetLabels()[kobev1.LabelPool]; name != "" {
		return []string{name}
	}
	return nil
}

// Setup registers every index on the manager's cache.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	fi := mgr.GetFieldIndexer()
	if err := fi.IndexField(ctx, &kobev1.ClusterLease{}, LeasePool, func(o client.Object) []string {
		return []string{o.(*kobev1.ClusterLease).Spec.Pool}
	}); err != nil {
		return fmt.Errorf("indexing leases by pool: %w", err)
	}
	if err := fi.IndexField(ctx, &kobev1.ClusterLease{}, ActiveLeasePool, ActiveLeasePoolName); err != nil {
		return fmt.Errorf("indexing active leases by pool: %w", err)
	}
	if err := fi.IndexField(ctx, &kobev1.ClusterLease{}, LeaseIdentity, func(o client.Object) []string {
		return []string{o.(*kobev1.ClusterLease).Spec.Requester.Identity}
	}); err != nil {
		return fmt.Errorf("indexing leases by identity: %w", err)
	}
	if err := fi.IndexField(ctx, &kobev1.ClusterLease{}, LeaseInstanceUID, LeaseInstance); err != nil {
		return fmt.Errorf("indexing leases by member: %w", err)
	}
	if err := fi.IndexField(ctx, &kobev1.ClusterInstance{}, InstanceLeaseUID, InstanceLease); err != nil {
		return fmt.Errorf("indexing members by lease: %w", err)
	}
	if err := fi.IndexField(ctx, &kobev1.ClusterInstance{}, InstancePool, InstancePoolName); err != nil {
		return fmt.Errorf("indexing instances by pool: %w", err)
	}
	return nil
}
