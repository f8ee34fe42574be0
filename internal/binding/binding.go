package binding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// ErrNoReadyMember means the pool has no Ready, unbound member right now.
var ErrNoReadyMember = errors.New("no ready member")

// ErrUncertain means a member write failed in a way that does not say
// whether the API server applied it (a timeout, a dropped connection, a 5xx).
// The caller must not claim another member for the lease until a live read
// shows which members name it (Members).
var ErrUncertain = errors.New("member write outcome unknown")

// LostRace reports whether a failed Bind lost a race (the members it saw were
// taken meanwhile), which retrying soon with fresh objects resolves, rather
// than failing for a reason retrying may not fix (the API server refused a
// write), which the caller must report.
func LostRace(err error) bool {
	return errors.Is(err, ErrNoReadyMember)
}

// maxAttempts bounds how many members one Bind call tries.
const maxAttempts = 8

// Binder claims members for leases.
type Binder struct {
	// Client writes the member and re-reads it after a conflict.
	Client client.Client
	// Reader lists members, reads their pool (for its current template) and
	// looks leases up by the index.LeaseInstanceUID index; normally the
	// manager's cache.
	Reader client.Reader
	Clock  clock.PassiveClock
	// Verifiable says whether members of a backend type can be proven
	// destroyed (backend.CanVerify of the wired backend); nil: none can,
	// and every VerifiedDestroy lease is refused.
	Verifiable func(kobev1.BackendType) bool

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

// Result is a successful claim: the member names the lease.
type Result struct {
	// Lease is the lease as given; its status is not written by Bind.
	Lease *kobev1.ClusterLease
	// Instance is the member as the API server answered the claim: its
	// spec.leaseRef names the lease, with the moment the bind took effect.
	Instance *kobev1.ClusterInstance
}

// Bind claims a Ready member of l's pool for l with one Update of the member
// fenced by its resourceVersion (the protocol in doc.go). It writes nothing
// to l: the caller records the bind on the lease (RecordBound) afterwards.
// Members built from the pool's current template are tried first.
// A failure for which LostRace is false carries the API server's reason, or
// wraps ErrUncertain when a write may have landed.
func (b *Binder) Bind(ctx context.Context, l *kobev1.ClusterLease) (*Result, error) {
	pl := b.pool(ctx, l)
	if u := pool.HandOutRefusal(pl); u != nil {
		// Members whose isolation is not proven, or of a version other than
		// the one the pool asks for, wait with the lease, as if none were
		// Ready, until the pool says otherwise.
		return nil, fmt.Errorf("%w: %s", ErrNoReadyMember, u.Message)
	}
	if l.Spec.CleanupMode == kobev1.CleanupVerifiedDestroy {
		if err := b.CheckCleanupMode(l.Spec.CleanupMode, pl); err != nil {
			return nil, err
		}
	}
	// The cache's own objects, not copies: a copy of every member of the
	// pool on each hand-out was an eighth of the operator's CPU under load
	// (make bench, 16 callers) and a millisecond per 64 members on the
	// critical path. They are only read; the one claimed is copied first.
	var members kobev1.ClusterInstanceList
	if err := b.Reader.List(ctx, &members, client.InNamespace(l.Namespace), client.MatchingFields{index.InstancePool: l.Spec.Pool}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing members of pool %s: %w", l.Spec.Pool, err)
	}
	candidates := b.candidates(ctx, l, members.Items)

	attempts := 0
	var failed error // the last member that failed for a reason other than being taken
	for _, inst := range candidates {
		if attempts >= maxAttempts || ctx.Err() != nil {
			break
		}
		if _, done := b.taken.Load(inst.UID); done {
			continue
		}
		named, err := b.namedByLease(ctx, inst)
		if err != nil {
			return nil, err
		}
		if named {
			continue
		}
		if _, busy := b.inFlight.LoadOrStore(inst.UID, struct{}{}); busy {
			continue
		}
		attempts++
		res, err := b.claim(ctx, l, inst.DeepCopy())
		b.inFlight.Delete(inst.UID)
		if err == nil {
			b.remember(inst.UID)
			return res, nil
		}
		if errors.Is(err, ErrUncertain) {
			// The member may name l now: claiming a second one could give
			// l two members. The caller finds out with a live read.
			b.remember(inst.UID)
			return nil, fmt.Errorf("binding lease %s: %w", l.Name, err)
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
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("binding lease %s: %w", l.Name, err)
	}
	if attempts > 0 {
		return nil, fmt.Errorf("%w: the %d members tried were taken meanwhile", ErrNoReadyMember, attempts)
	}
	return nil, ErrNoReadyMember
}

// candidates lists the available members in the order Bind tries them:
// those built from the pool's current template first, so that a lease never
// gets an outdated member while a current one is Ready (the pool replaces
// the others), each group in random order to spread concurrent binders over
// members. When the pool cannot be read, every member is one group.
func (b *Binder) candidates(ctx context.Context, l *kobev1.ClusterLease, members []kobev1.ClusterInstance) []*kobev1.ClusterInstance {
	current := make([]*kobev1.ClusterInstance, 0, len(members))
	var outdated []*kobev1.ClusterInstance
	hash := b.currentTemplate(ctx, l)
	for i := range members {
		m := &members[i]
		switch {
		case !lease.Bindable(m):
		case !lease.ServesCleanup(m, l.Spec.CleanupMode, b.Verifiable):
		case hash == "" || m.Spec.TemplateHash == hash:
			current = append(current, m)
		default:
			outdated = append(outdated, m)
		}
	}
	rand.Shuffle(len(current), func(i, j int) { current[i], current[j] = current[j], current[i] })
	rand.Shuffle(len(outdated), func(i, j int) { outdated[i], outdated[j] = outdated[j], outdated[i] })
	return append(current, outdated...)
}

// CheckCleanupMode refuses, before anything is bound, a cleanup mode that
// pool p's backend cannot honour (lease.CheckCleanupMode, given b.Verifiable).
func (b *Binder) CheckCleanupMode(mode kobev1.CleanupMode, p *kobev1.ClusterPool) error {
	if mode != kobev1.CleanupVerifiedDestroy {
		return nil
	}
	return lease.CheckCleanupMode(mode, p, b.Verifiable)
}

// pool is l's pool from the reader, nil when it cannot be read.
func (b *Binder) pool(ctx context.Context, l *kobev1.ClusterLease) *kobev1.ClusterPool {
	p := &kobev1.ClusterPool{}
	if err := b.Reader.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Spec.Pool}, p); err != nil {
		return nil
	}
	return p
}

// currentTemplate is the template hash l's pool builds members from now, or
// "" when the pool cannot be read (gone, or not in the cache yet): then no
// member is preferred, as before templates were compared.
func (b *Binder) currentTemplate(ctx context.Context, l *kobev1.ClusterLease) string {
	p := b.pool(ctx, l)
	if p == nil {
		return ""
	}
	if p.Status.TemplateHash != "" {
		// What the pool controller builds from, bundle content included.
		return p.Status.TemplateHash
	}
	return pool.TemplateHash(&p.Spec)
}

// namedByLease reports whether some lease's status names inst. Only a
// member's own leaseRef makes a bind, but a member that a lease's status
// names (a forged or stale status) is never handed to another lease: the
// lease controller recycles it.
func (b *Binder) namedByLease(ctx context.Context, inst *kobev1.ClusterInstance) (bool, error) {
	var ls kobev1.ClusterLeaseList
	if err := b.Reader.List(ctx, &ls, client.InNamespace(inst.Namespace), client.MatchingFields{index.LeaseInstanceUID: string(inst.UID)}); err != nil {
		return false, fmt.Errorf("looking up leases naming member %s: %w", inst.Name, err)
	}
	return len(ls.Items) > 0, nil
}

// errMemberTaken marks a member that another lease claimed, or that stopped
// being available, while this binder tried it: a lost race, not a failure.
var errMemberTaken = errors.New("member taken")

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

// claim writes the member side of the binding, the only write of a bind. On
// a conflict it re-reads the member once: a status write (health probe) may
// have moved its resourceVersion without making it unavailable.
func (b *Binder) claim(ctx context.Context, l *kobev1.ClusterLease, inst *kobev1.ClusterInstance) (*Result, error) {
	boundAt := b.Clock.Now().UTC().Truncate(time.Second)
	for try := 0; try < 2; try++ {
		if !lease.Bindable(inst) {
			return nil, fmt.Errorf("%w: member %s is no longer available", errMemberTaken, inst.Name)
		}
		SetMemberBinding(inst, l, boundAt)
		err := b.Client.Update(ctx, inst)
		switch {
		case err == nil:
			return &Result{Lease: l, Instance: inst}, nil
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w: member %s is gone", errMemberTaken, inst.Name)
		case Uncertain(err):
			return nil, fmt.Errorf("%w: claiming member %s: %w", ErrUncertain, inst.Name, err)
		case !apierrors.IsConflict(err):
			return nil, fmt.Errorf("claiming member %s: %w", inst.Name, err)
		}
		fresh := &kobev1.ClusterInstance{}
		if gerr := b.Client.Get(ctx, client.ObjectKeyFromObject(inst), fresh); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return nil, fmt.Errorf("%w: member %s is gone", errMemberTaken, inst.Name)
			}
			return nil, fmt.Errorf("re-reading member %s: %w", inst.Name, gerr)
		}
		*inst = *fresh
	}
	return nil, fmt.Errorf("%w: member %s kept changing", errMemberTaken, inst.Name)
}

// Uncertain reports whether a failed write may still have been applied by
// the API server: anything but a refusal it answered with a 4xx status.
func Uncertain(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == 0 || code >= 500
	}
	return true
}
