package binding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// ErrNoReadyMember means the pool has no Ready, unbound member right now.
var ErrNoReadyMember = errors.New("no ready member")

// ErrLeaseChanged means the lease changed under the binder (another binder
// won, or it ended); re-read it and decide again.
var ErrLeaseChanged = errors.New("lease changed while binding")

// ErrCleanupModeUnsupported: no wired backend can prove a VerifiedDestroy,
// so such leases are refused before binding, never silently downgraded.
var ErrCleanupModeUnsupported = errors.New("cleanupMode VerifiedDestroy is not supported by the wired backends")

// LostRace reports whether a failed Bind lost a race (the members it saw were
// taken meanwhile, or the lease changed under it), which retrying soon with
// fresh objects resolves, rather than failing for a reason retrying may not
// fix (the API server refused a write), which the caller must report.
func LostRace(err error) bool {
	return errors.Is(err, ErrNoReadyMember) || errors.Is(err, ErrLeaseChanged)
}

// maxAttempts bounds how many members one Bind call tries.
const maxAttempts = 8

// Binder binds leases to members.
type Binder struct {
	// Client writes (and reads back on conflict, uncached).
	Client client.Client
	// Reader lists members; normally the manager's cache.
	Reader client.Reader
	Clock  clock.PassiveClock

	// inFlight holds members some goroutine of this process is binding, so
	// that concurrent requests in one replica spread over members instead of
	// colliding on the first one. Correctness never depends on it.
	inFlight sync.Map
	// taken holds members this process bound (UID -> time). A member is
	// never reused, so once bound it is skipped even while the cache still
	// shows it Ready; entries are forgotten after takenMemory.
	taken sync.Map
}

// takenMemory is how long a bound member is remembered; far longer than any
// cache lag.
const takenMemory = 10 * time.Minute

// Result is a successful bind.
type Result struct {
	Lease    *kobev1.ClusterLease
	Instance *kobev1.ClusterInstance
}

// Bind binds l (which must be queued, with a current resourceVersion) to a
// Ready member of its pool, with the given TTL counted from now. A failure
// for which LostRace is false carries the API server's reason.
func (b *Binder) Bind(ctx context.Context, l *kobev1.ClusterLease, ttl time.Duration) (*Result, error) {
	if l.Spec.CleanupMode == kobev1.CleanupVerifiedDestroy {
		return nil, ErrCleanupModeUnsupported
	}
	var members kobev1.ClusterInstanceList
	if err := b.Reader.List(ctx, &members, client.InNamespace(l.Namespace), client.MatchingLabels{kobev1.LabelPool: l.Spec.Pool}); err != nil {
		return nil, fmt.Errorf("listing members of pool %s: %w", l.Spec.Pool, err)
	}
	candidates := make([]*kobev1.ClusterInstance, 0, len(members.Items))
	for i := range members.Items {
		if Available(&members.Items[i]) {
			candidates = append(candidates, &members.Items[i])
		}
	}
	// Random order spreads concurrent binders over members.
	rand.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })

	attempts := 0
	var failed error // the last member that failed for a reason other than being taken
	for _, inst := range candidates {
		if attempts >= maxAttempts {
			break
		}
		if _, done := b.taken.Load(inst.UID); done {
			continue
		}
		if _, busy := b.inFlight.LoadOrStore(inst.UID, struct{}{}); busy {
			continue
		}
		attempts++
		res, err := b.bindTo(ctx, l, inst.DeepCopy(), ttl)
		b.inFlight.Delete(inst.UID)
		if err == nil {
			b.remember(inst.UID)
			return res, nil
		}
		if errors.Is(err, ErrLeaseChanged) || errors.Is(err, errLeaseWrite) || ctx.Err() != nil {
			return nil, err
		}
		if !errors.Is(err, errMemberTaken) {
			failed = err
		}
		// Try the next member.
	}
	if failed != nil {
		// Not a lost race: say why, so the caller can log it and back off.
		return nil, fmt.Errorf("binding lease %s: %w", l.Name, failed)
	}
	if attempts > 0 {
		return nil, fmt.Errorf("%w: the %d members tried were taken meanwhile", ErrNoReadyMember, attempts)
	}
	return nil, ErrNoReadyMember
}

// errMemberTaken marks a member that another lease claimed, or that stopped
// being available, while this binder tried it: a lost race, not a failure.
var errMemberTaken = errors.New("member taken")

// errLeaseWrite marks a failure to write the lease's own claim for a reason
// other than a conflict: trying another member cannot help.
var errLeaseWrite = errors.New("lease claim not written")

func (b *Binder) remember(uid types.UID) {
	now := b.Clock.Now()
	b.taken.Store(uid, now)
	b.taken.Range(func(k, v any) bool {
		if now.Sub(v.(time.Time)) > takenMemory {
			b.taken.Delete(k)
		}
		return true
	})
}

// Available reports whether a member can be bound now.
func Available(inst *kobev1.ClusterInstance) bool {
	return inst.DeletionTimestamp == nil && inst.Spec.LeaseRef == nil && inst.Status.Phase == kobev1.InstanceReady
}

func (b *Binder) bindTo(ctx context.Context, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance, ttl time.Duration) (*Result, error) {
	now := metav1.NewTime(b.Clock.Now().UTC().Truncate(time.Second))
	expires := metav1.NewTime(now.Add(ttl))

	// 1. Claim the lease.
	claimed := l.DeepCopy()
	claimed.Status.Phase = kobev1.LeaseBound
	claimed.Status.InstanceRef = &kobev1.ObjectRef{Name: inst.Name, UID: inst.UID}
	claimed.Status.BoundAt = &now
	claimed.Status.ExpiresAt = &expires
	claimed.Status.QueuePosition = 0
	claimed.Status.ObservedGeneration = l.Generation
	meta.SetStatusCondition(&claimed.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionBound, Status: metav1.ConditionTrue, Reason: kobev1.ReasonBound,
		Message: fmt.Sprintf("bound to %s", inst.Name), ObservedGeneration: l.Generation, LastTransitionTime: now,
	})
	if err := b.Client.Status().Update(ctx, claimed); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %w", ErrLeaseChanged, err)
		}
		return nil, fmt.Errorf("%w: claiming lease %s: %w", errLeaseWrite, l.Name, err)
	}

	// 2. Claim the member.
	err := b.claimInstance(ctx, claimed, inst)
	if err == nil {
		*l = *claimed
		return &Result{Lease: claimed, Instance: inst}, nil
	}

	// 3. Roll the lease back so it can be bound elsewhere.
	if rbErr := b.rollback(ctx, claimed); rbErr != nil {
		return nil, fmt.Errorf("%w: member %s refused (%w) and rollback failed: %w", ErrLeaseChanged, inst.Name, err, rbErr)
	}
	*l = *claimed
	return nil, fmt.Errorf("member %s: %w", inst.Name, err)
}

// claimInstance writes the member side of the binding. On a conflict it
// re-reads the member once: a status write (health probe) may have moved its
// resourceVersion without making it unavailable.
func (b *Binder) claimInstance(ctx context.Context, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance) error {
	for try := 0; try < 2; try++ {
		if !Available(inst) {
			return fmt.Errorf("%w: member %s is no longer available", errMemberTaken, inst.Name)
		}
		SetMemberBinding(inst, l)
		err := b.Client.Update(ctx, inst)
		if err == nil {
			return nil
		}
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: member %s is gone", errMemberTaken, inst.Name)
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("claiming member %s: %w", inst.Name, err)
		}
		fresh := &kobev1.ClusterInstance{}
		if gerr := b.Client.Get(ctx, client.ObjectKeyFromObject(inst), fresh); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return fmt.Errorf("%w: member %s is gone", errMemberTaken, inst.Name)
			}
			return fmt.Errorf("re-reading member %s: %w", inst.Name, gerr)
		}
		*inst = *fresh
	}
	return fmt.Errorf("%w: member %s kept changing", errMemberTaken, inst.Name)
}

// SetMemberBinding writes the member side of a binding into inst: the lease
// reference, the lease label, and the lease as controller owner so that
// deleting the pool does not take a member in use with it.
func SetMemberBinding(inst *kobev1.ClusterInstance, l *kobev1.ClusterLease) {
	inst.Spec.LeaseRef = &kobev1.LeaseBinding{Name: l.Name, UID: l.UID}
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

func (b *Binder) rollback(ctx context.Context, l *kobev1.ClusterLease) error {
	Unbind(l, b.Clock.Now())
	return b.Client.Status().Update(ctx, l)
}

// Unbind turns a claimed-but-unconfirmed lease back into a queued one, in
// memory; the caller persists it with a fenced status write.
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

// Consistent reports whether the member side of a bound lease points back.
func Consistent(l *kobev1.ClusterLease, inst *kobev1.ClusterInstance) bool {
	return l.Status.InstanceRef != nil && inst.Spec.LeaseRef != nil &&
		inst.UID == l.Status.InstanceRef.UID && inst.Spec.LeaseRef.UID == l.UID
}
