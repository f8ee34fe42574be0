package leaseservice

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Get returns the caller's lease named by ref (a lease id or an alias), with
// a kubeconfig once Bound. Another caller's lease is ErrLeaseNotFound.
func (s *Service) Get(ctx context.Context, p *auth.Principal, ref string) (*Lease, error) {
	l, err := s.resolve(ctx, p, ref)
	if err != nil {
		return nil, err
	}
	return s.view(ctx, p, l)
}

// waitPoll is how often WaitWhilePending looks at the cache.
const waitPoll = 25 * time.Millisecond

// WaitWhilePending returns once the caller's lease named by ref is no longer
// Pending as the cache shows it (bound, a member naming it, ended or gone),
// once max has passed, or at once when it is not Pending or not the
// caller's: Get answers after it, from a live read. It reads only the cache,
// so a waiting caller costs the API server nothing.
func (s *Service) WaitWhilePending(ctx context.Context, p *auth.Principal, ref string, max time.Duration) {
	l, err := s.resolve(ctx, p, ref)
	if err != nil || !lease.IsQueued(l) {
		return
	}
	key := client.ObjectKeyFromObject(l)
	_ = wait.PollUntilContextTimeout(ctx, waitPoll, max, false, func(ctx context.Context) (bool, error) {
		cached := &kobev1.ClusterLease{}
		if err := s.opts.Reader.Get(ctx, key, cached); err != nil || cached.UID != l.UID || !lease.IsQueued(cached) {
			return true, nil
		}
		var named kobev1.ClusterInstanceList
		if err := s.opts.Reader.List(ctx, &named, client.InNamespace(l.Namespace),
			client.MatchingFields{index.InstanceLeaseUID: string(l.UID)}, client.UnsafeDisableDeepCopy); err != nil {
			return true, nil
		}
		return len(named.Items) > 0, nil
	})
}

// ListFilter narrows List; its zero value lists every active lease of the
// caller. Fields are exact matches.
type ListFilter struct {
	// Alias keeps the lease with this alias (at most one is active).
	Alias string
	// Pool keeps the leases of this pool.
	Pool string
}

// Validate says why f cannot match any lease (ErrInvalid), or nil: a
// malformed alias or pool name is a caller's mistake to report, not an
// empty listing.
func (f ListFilter) Validate() error {
	if f.Alias != "" {
		if err := wire.ValidateAlias(f.Alias); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if f.Pool != "" {
		return validName("pool", f.Pool)
	}
	return nil
}

func (f ListFilter) keeps(l *kobev1.ClusterLease) bool {
	return (f.Alias == "" || l.Labels[kobev1.LabelAlias] == f.Alias) && (f.Pool == "" || l.Spec.Pool == f.Pool)
}

// List returns the caller's active leases that f keeps, by id. It reads
// them from the API server, not the cache, so that a caller who has just
// released or created a lease sees that in its next listing.
func (s *Service) List(ctx context.Context, p *auth.Principal, f ListFilter) ([]Lease, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	// Live, and without the caller's ended leases (ownedLeases).
	leases, err := s.ownedLeases(ctx, ownerOf(p))
	if err != nil {
		return nil, err
	}
	out := []Lease{}
	pools := map[string]func(*kobev1.ClusterLease) int32{}
	for i := range leases {
		l := &leases[i]
		if !owns(p, l) || !lease.IsActive(l) || !f.keeps(l) {
			continue
		}
		v := Lease{Object: l, Pool: s.poolOrNil(ctx, l.Spec.Pool), Owned: true}
		if lease.IsQueued(l) {
			pos, ok := pools[l.Spec.Pool]
			if !ok {
				var err error
				if pos, err = s.positions(ctx, l.Spec.Pool); err != nil {
					return nil, err
				}
				pools[l.Spec.Pool] = pos
			}
			v.QueuePosition = pos(l)
		}
		out = append(out, v)
	}
	sortByID(out)
	return out, nil
}

// ListPool returns the active leases of a pool the caller may use, by id;
// Owned tells the caller's own.
func (s *Service) ListPool(ctx context.Context, p *auth.Principal, poolName string) ([]Lease, error) {
	pl, err := s.Pool(ctx, p, poolName)
	if err != nil {
		return nil, err
	}
	var ls kobev1.ClusterLeaseList
	if err := s.opts.Reader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), client.MatchingFields{index.ActiveLeasePool: pl.Name}); err != nil {
		return nil, fmt.Errorf("listing leases of pool %s: %w", pl.Name, err)
	}
	pos := queuePositions(ls.Items, pl.Name)
	out := []Lease{}
	for i := range ls.Items {
		l := &ls.Items[i]
		if !lease.IsActive(l) {
			continue
		}
		out = append(out, Lease{Object: l, Pool: pl, Owned: owns(p, l), QueuePosition: pos(l)})
	}
	sortByID(out)
	return out, nil
}

func sortByID(ls []Lease) {
	slices.SortFunc(ls, func(a, b Lease) int { return strings.Compare(a.Object.Name, b.Object.Name) })
}

// Extend adds by (0: the lease's own TTL) to the expiry of the caller's
// lease named by ref, and returns it with a kubeconfig minted for the new
// expiry. The caller's current rule must still grant the lease's pool
// (else ErrPoolNotAllowed). by is clamped by the caller's current rule and
// by the max TTL of the rule the lease was created under (spec.maxTtl);
// the extension count by the lease's maxExtensions and the current rule's.
// A refusal wraps ErrPoolNotAllowed, lease.ErrExtensionLimit,
// lease.ErrNotBound, lease.ErrExpired or lease.ErrBadExtension and
// changes nothing.
func (s *Service) Extend(ctx context.Context, p *auth.Principal, ref string, by time.Duration) (*Lease, error) {
	l, err := s.resolve(ctx, p, ref)
	if err != nil {
		return nil, err
	}
	s.awaitBoundCopy(ctx, l.UID)
	if !p.AllowsPool(l.Spec.Pool) {
		refusal := fmt.Errorf("%w: your rule (policy %s, rules[%d]) no longer grants pool %q, so lease %s cannot be extended; it ends at its expiry",
			ErrPoolNotAllowed, p.Policy, p.RuleIndex, l.Spec.Pool, l.Name)
		s.audit(p, "extend", l.Name, l.Spec.Pool, "refused: pool no longer allowed")
		return nil, refusal
	}
	if by == 0 {
		by = lease.TTL(l, nil)
	}
	by, _ = p.ClampTTL(by)
	var refusal error
	var kc []byte
	var member *kobev1.ClusterInstance
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		refusal = nil
		if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			return err
		}
		// Only a bind its member confirms, read live, is extended; one whose
		// status copy is not written yet gets it written with the extension.
		// The expiry extended is the one the bind allows (confirmed caps a
		// status written later).
		pool := s.poolOrNil(ctx, l.Spec.Pool)
		shown, inst, err := s.confirmed(ctx, l, pool)
		if err != nil {
			return err
		}
		*l = *shown
		step := min(by, lease.ExtensionCap(l, pool))
		if inst == nil {
			if err := lease.Extend(l, step, s.opts.Clock.Now()); err != nil {
				refusal = err
			} else {
				refusal = fmt.Errorf("%w (no member confirms lease %s)", lease.ErrNotBound, l.Name)
			}
			return nil
		}
		// The lease's own cap says so in lease.Extend's words; the current
		// rule's only when it is the smaller.
		if allowed := p.MaxExtensions(); allowed < lease.MaxExtensions(l) && l.Status.Extensions >= allowed {
			refusal = fmt.Errorf("%w: your rule (policy %s, rules[%d]) allows %d extensions and lease %s has had %d",
				lease.ErrExtensionLimit, p.Policy, p.RuleIndex, allowed, l.Name, l.Status.Extensions)
			return nil
		}
		if err := lease.Extend(l, step, s.opts.Clock.Now()); err != nil {
			refusal = err
			return nil
		}
		lease.CapExpiry(l, pool, binding.BoundAt(inst, l))
		// Mint before saving, so that a failure does not use up an extension.
		if kc, err = s.kubeconfig(ctx, l, inst); err != nil {
			return err
		}
		member = inst
		return s.opts.Client.Status().Update(ctx, l)
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: you hold no lease %q; GET /v1/leases lists yours", ErrLeaseNotFound, ref)
	case err != nil:
		return nil, fmt.Errorf("extending lease %s: %w", l.Name, err)
	case refusal != nil:
		s.audit(p, "extend", l.Name, l.Spec.Pool, "refused: "+refusal.Error())
		return nil, refusal
	}
	expires := l.Status.ExpiresAt.UTC().Format(time.RFC3339)
	s.audit(p, "extend", l.Name, l.Spec.Pool, "extended to "+expires, minted(member, kc)...)
	return &Lease{Object: l, Pool: s.poolOrNil(ctx, l.Spec.Pool), Kubeconfig: kc, Owned: true}, nil
}

// Release ends the caller's lease named by ref. It succeeds as well when
// the caller holds no such lease: one that never existed, one already ended
// or deleted, or another caller's, which it leaves untouched. So release is
// idempotent for the owner and tells nobody else whether a lease exists.
// Only a malformed ref (ErrInvalid) or a failure is an error.
func (s *Service) Release(ctx context.Context, p *auth.Principal, ref string) error {
	l, err := s.resolve(ctx, p, ref)
	if errors.Is(err, ErrLeaseNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if written := s.awaitBoundCopy(ctx, l.UID); written != nil {
		l = written // newer than the cache may show
	}
	ended := false
	var held *kobev1.ClusterLease // l as it was before its end
	fromCache := true
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ended = false
		// The first try ends l as the cache (or this replica's bound copy)
		// showed it: the write is fenced by its resourceVersion, so a copy
		// that is not current fails (a conflict) and the next try reads
		// live. A lease never leaves an ended phase: one shown ended is.
		if !fromCache {
			if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
				return err
			}
		}
		fromCache = false
		if !lease.IsActive(l) {
			return nil
		}
		held = l.DeepCopy()
		lease.End(l, kobev1.LeaseReleased, kobev1.ReasonReleased, "released by "+p.Identity, s.opts.Clock.Now())
		ended = true
		return s.opts.Client.Status().Update(ctx, l)
	})
	if apierrors.IsNotFound(err) || (err == nil && !ended) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("releasing lease %s: %w", l.Name, err)
	}
	// Now that no kubeconfig is minted for it any more, and before the
	// caller hears that the lease ended.
	s.fence(ctx, held)
	metrics.LeaseEnded(l.Spec.Pool, kobev1.ReasonReleased)
	s.audit(p, "release", l.Name, l.Spec.Pool, "released")
	return nil
}

// Heartbeat records that the caller, holder of the lease ref names, is
// alive (lease.RecordHeartbeat): a write only when the beat moves the
// recorded deadline by a grain or more, so most beats cost one read and
// nothing else. The lease is judged as the API server holds it, not as the
// cache shows it: a release written a moment ago (by this replica or
// another) must answer 410, never a Bound lease that looks alive. The answer
// is the lease, without kubeconfig, with when it ends unless another beat
// comes.
func (s *Service) Heartbeat(ctx context.Context, p *auth.Principal, ref string) (*Lease, error) {
	cached, err := s.resolve(ctx, p, ref)
	if err != nil {
		return nil, err
	}
	s.awaitBoundCopy(ctx, cached.UID)
	now := s.opts.Clock.Now()
	l := &kobev1.ClusterLease{}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.opts.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), l); err != nil {
			return err
		}
		if l.UID != cached.UID {
			return apierrors.NewNotFound(kobev1.GroupVersion.WithResource("clusterleases").GroupResource(), cached.Name)
		}
		if err := heartbeatRefusal(l); err != nil || !lease.RecordHeartbeat(l, now) {
			return err
		}
		return s.opts.Client.Status().Update(ctx, l)
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: you hold no lease %q; GET /v1/leases lists yours", ErrLeaseNotFound, cached.Name)
	case errors.Is(err, ErrNoHeartbeat), errors.Is(err, ErrLeaseEnded):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("recording a heartbeat of lease %s: %w", cached.Name, err)
	}
	return &Lease{Object: l, Pool: s.poolOrNil(ctx, l.Spec.Pool), Owned: true}, nil
}

// heartbeatRefusal says why l takes no heartbeat, or nil.
func heartbeatRefusal(l *kobev1.ClusterLease) error {
	if _, ok := lease.HeartbeatTimeout(l); !ok {
		return fmt.Errorf("%w: lease %s was created without heartbeat_timeout, so it lasts its ttl; nothing to renew", ErrNoHeartbeat, l.Name)
	}
	if !lease.IsActive(l) {
		return fmt.Errorf("%w: lease %s is %s; lease again", ErrLeaseEnded, l.Name, l.Status.Phase)
	}
	return nil
}
