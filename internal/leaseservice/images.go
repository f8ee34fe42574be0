package leaseservice

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// BoundMember is the member of one of the caller's leases, ref its ID or
// alias, confirmed by a live read: what kobe load puts images into. The
// API asks before it reads an archive, so a lease that cannot take one
// costs no upload, and again (LoadImages) before the import.
func (s *Service) BoundMember(ctx context.Context, p *auth.Principal, ref string) (*kobev1.ClusterLease, *kobev1.ClusterInstance, error) {
	cached, err := s.resolve(ctx, p, ref)
	if err != nil {
		return nil, nil, err
	}
	s.awaitBoundCopy(ctx, cached.UID)
	l := &kobev1.ClusterLease{}
	if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), l); err != nil || l.UID != cached.UID {
		if err == nil || apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("%w: you hold no lease %q; GET /v1/leases lists yours", ErrLeaseNotFound, cached.Name)
		}
		return nil, nil, fmt.Errorf("reading lease %s: %w", cached.Name, err)
	}
	if !lease.IsActive(l) {
		return nil, nil, fmt.Errorf("%w: lease %s is %s; lease again", ErrLeaseEnded, l.Name, l.Status.Phase)
	}
	shown, inst, err := s.confirmed(ctx, l, s.poolOrNil(ctx, l.Spec.Pool))
	switch {
	case err != nil:
		return nil, nil, err
	case inst == nil && !lease.IsActive(shown):
		return nil, nil, fmt.Errorf("%w: lease %s is %s; lease again", ErrLeaseEnded, l.Name, shown.Status.Phase)
	case inst == nil && shown.Status.ExpiresAt != nil && !s.opts.Clock.Now().Before(shown.Status.ExpiresAt.Time):
		return nil, nil, fmt.Errorf("%w: lease %s expired at %s; lease again", ErrLeaseEnded, l.Name, shown.Status.ExpiresAt.UTC().Format(time.RFC3339))
	case inst == nil:
		return nil, nil, fmt.Errorf("%w: lease %s has no member yet; wait until it is Bound (kobe lease waits)", ErrLeaseNotBound, l.Name)
	}
	return shown, inst, nil
}

// LoadImages imports a docker-archive (imageload.Normalise's) holding
// images into the member of the caller's lease ref, confirmed again now,
// and returns the lease, its member and how many nodes hold the images.
func (s *Service) LoadImages(ctx context.Context, p *auth.Principal, ref, archive string, images []string) (*kobev1.ClusterLease, *kobev1.ClusterInstance, int, error) {
	l, inst, err := s.BoundMember(ctx, p, ref)
	if err != nil {
		return nil, nil, 0, err
	}
	if s.opts.LoadImages == nil {
		return nil, nil, 0, fmt.Errorf("%w: this operator loads no images", ErrNoImages)
	}
	start := s.opts.Clock.Now()
	nodes, err := s.opts.LoadImages(ctx, inst, archive)
	switch {
	case errors.Is(err, backend.ErrNoNodes):
		err = fmt.Errorf("%w: member %s has no nodes (%s)", ErrNoImages, inst.Name, noNodesHint(inst.Spec.Backend.Type, l.Spec.Pool))
	case errors.Is(err, backend.ErrOtherHost), errors.Is(err, backend.ErrUnavailable):
		err = fmt.Errorf("%w: %w", ErrMemberUnavailable, err)
	case err != nil && ctx.Err() == nil:
		err = fmt.Errorf("%w: %w", ErrImportFailed, err)
	}
	outcome := "loaded"
	if err != nil {
		outcome = "failed"
	}
	s.audit(p, "load", l.Name, l.Spec.Pool, outcome, "member", inst.Name, "images", images, "nodes", nodes,
		"took", s.opts.Clock.Since(start).Round(time.Millisecond).String())
	if err != nil {
		return nil, nil, nodes, err
	}
	return l, inst, nodes, nil
}

// noNodesHint says how a pool's members get nodes, where they can.
func noNodesHint(t kobev1.BackendType, pool string) string {
	switch t {
	case kobev1.BackendLocal, kobev1.BackendKubernetes:
		return fmt.Sprintf("pool %s sets backend.%s.nodes to 0", pool, t)
	}
	return fmt.Sprintf("%s members never have nodes", t)
}
