// Package index registers the cache field indexes kobe's controllers and
// HTTP API look objects up by. Register them once per manager, in main.
package index

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

const (
	// LeasePool indexes ClusterLeases by spec.pool.
	LeasePool = "spec.pool"
	// LeaseIdentity indexes ClusterLeases by spec.requester.identity.
	LeaseIdentity = "spec.requester.identity"
)

// Setup registers every index on the manager's cache.
func Setup(ctx context.Context, mgr ctrl.Manager) error {
	fi := mgr.GetFieldIndexer()
	if err := fi.IndexField(ctx, &kobev1.ClusterLease{}, LeasePool, func(o client.Object) []string {
		return []string{o.(*kobev1.ClusterLease).Spec.Pool}
	}); err != nil {
		return fmt.Errorf("indexing leases by pool: %w", err)
	}
	if err := fi.IndexField(ctx, &kobev1.ClusterLease{}, LeaseIdentity, func(o client.Object) []string {
		return []string{o.(*kobev1.ClusterLease).Spec.Requester.Identity}
	}); err != nil {
		return fmt.Errorf("indexing leases by identity: %w", err)
	}
	return nil
}
