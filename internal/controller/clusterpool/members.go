package clusterpool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// ordinalBlock is how many ordinals one reservation takes beyond what the
// plan needs now: the reservation is a status write of its own, so members
// created one by one (every hand-out's replacement) share it.
const ordinalBlock = 16

// reserveOrdinals makes sure the plan's ordinals lie within the block the
// pool's status reserves (status.nextOrdinal, its end), and otherwise
// reserves a new block, fenced by the pool's resourceVersion: a pool read
// from a lagging cache goes stale (and decides again) instead of handing a
// block out twice. The reservation is judged against the status the API
// holds (the snapshot), and its write carries the rest of the new status
// (setStatus ran first), so it counts as the pool's paced status write.
// Which ordinals of the block this replica used is kept in memory
// (r.ordinals): a restart skips the rest of the block, a gap in the names
// and nothing worse.
func (r *Reconciler) reserveOrdinals(ctx context.Context, s *scope) error {
	reserved := s.pool.Status.NextOrdinal
	if base, ok := s.patch.Base().(*kobev1.ClusterPool); ok {
		reserved = base.Status.NextOrdinal
	}
	if s.plan.NextOrdinal > reserved {
		s.pool.Status.NextOrdinal = s.plan.NextOrdinal + ordinalBlock
		if err := s.patch.Status(ctx); err != nil {
			return fmt.Errorf("reserving ordinals up to %d: %w", s.pool.Status.NextOrdinal, err)
		}
		if s.patch.Done() {
			return nil
		}
		r.statusWrites.Wrote(s.pool.UID, s.conds.Now)
	}
	r.ordinals.used(s.pool.UID, s.plan.NextOrdinal)
	return nil
}

// createBatchMax bounds how many creates of one pool are in flight at once,
// and createsInFlightMax those of all pools together (createSlots).
// A refill of tens of sim members one create at a time ran at about 25 a
// second on a 2-core host (each create a round trip of 35-40 ms), slower
// than a burst of leases took them (make bench: a pool of 64 drained to 15
// and a fifth of the leases waited). More in flight than this adds little
// while the API server is the bound, and would crowd the hand-outs' writes:
// 16 pools filling at once with 16 creates each slowed make bench's fill of
// 1,000 pools from 99 s to 118 s.
const (
	createBatchMax     = 16
	createsInFlightMax = 16
)

// createSlots bounds the member creates in flight across every pool this
// replica reconciles. Its zero value is ready.
type createSlots struct {
	once sync.Once
	sem  *semaphore.Weighted
}

func (c *createSlots) get() *semaphore.Weighted {
	c.once.Do(func() { c.sem = semaphore.NewWeighted(createsInFlightMax) })
	return c.sem
}

// createBatches splits n creates into batches that double in size from 1
// up to createBatchMax (slow start, as Kubernetes' ReplicaSet controller
// creates pods): a plan of many members is created many at a time, and an
// API server that refuses every create (a quota, an admission webhook) sees
// one of them, not the whole plan.
func createBatches(n int) []int {
	var out []int
	for size := 1; n > 0; size = min(2*size, createBatchMax) {
		b := min(size, n)
		out = append(out, b)
		n -= b
	}
	return out
}

// createMembers creates the planned members, each batch (createBatches) at
// once. A batch with a create that failed ends the step: the members it did
// create are recorded, and the next decision plans the rest again.
func (r *Reconciler) createMembers(ctx context.Context, s *scope) error {
	p, plan := s.pool, s.plan
	next := 0
	for _, size := range createBatches(len(plan.Create)) {
		batch := make([]*kobev1.ClusterInstance, size)
		errs := make([]error, size)
		var wg sync.WaitGroup
		for i, n := range plan.Create[next : next+size] {
			m := pool.NewMember(p, n, plan.TemplateHash)
			m.Spec.Backend = *plan.MemberBackend.DeepCopy()
			m.Spec.Cluster.Limits = plan.MemberLimits.DeepCopy()
			batch[i] = m
			wg.Go(func() { errs[i] = r.createMember(ctx, m) })
		}
		wg.Wait()
		next += size
		var failed []error
		for i, m := range batch {
			switch err := errs[i]; {
			case apierrors.IsAlreadyExists(err):
			case err != nil:
				failed = append(failed, fmt.Errorf("creating member %s: %w", m.Name, err))
			default:
				r.created(ctx, s, m)
			}
		}
		if len(failed) > 0 {
			return errors.Join(failed...)
		}
	}
	return nil
}

// createMember creates m once one of the replica's create slots is free.
func (r *Reconciler) createMember(ctx context.Context, m *kobev1.ClusterInstance) error {
	slots := r.creates.get()
	if err := slots.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("waiting to create member %s: %w", m.Name, err)
	}
	defer slots.Release(1)
	return r.Client.Create(ctx, m)
}

// created records member m that the pool's reconcile just created: for the
// cache (expectations) and the host cap, which the reconcile's goroutine
// holds (lockHost).
func (r *Reconciler) created(ctx context.Context, s *scope, m *kobev1.ClusterInstance) {
	r.expected.expect(s.pool.UID, []string{m.Name}, nil, s.conds.Now)
	if s.host.Max > 0 {
		r.host.record(m.UID, s.pool.Spec.Backend.Type, s.conds.Now)
	}
	// No Event: creating members is the pool's routine, and each Event is
	// a write on the host's API server.
	ctrl.LoggerFrom(ctx).Info("Member created", "member", m.Name, "target", s.plan.Target)
}

// scaleDown deletes the unbound members the plan removes: Ready ones the
// pool no longer wants or replaces, Creating ones of an older template. A
// member that changed meanwhile (bound, probed) is left alone and the pool
// decides again in a second.
func (r *Reconciler) scaleDown(ctx context.Context, s *scope) (ctrl.Result, error) {
	if len(s.plan.Delete) == 0 {
		return ctrl.Result{RequeueAfter: s.plan.RequeueAfter}, nil
	}
	// A removal is decided from the pool's status too (lastPressure, which
	// scale-down waits on): a pool read from a lagging cache must not
	// delete, so the pool is read live first and a newer one decides again.
	live := &kobev1.ClusterPool{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.pool), live); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if live.ResourceVersion != s.pool.ResourceVersion {
		s.patch.MarkStale()
		return ctrl.Result{}, nil
	}
	raced := false
	for _, rm := range s.plan.Delete {
		lost, err := r.deleteMember(ctx, s.pool, &rm.Member, rm.Reason, rm.Why)
		if err != nil {
			return ctrl.Result{}, err
		}
		raced = raced || lost
	}
	if raced {
		ctrl.LoggerFrom(ctx).Info("A member changed before its deletion; deciding again", "after", time.Second)
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: s.plan.RequeueAfter}, nil
}

// deleteMembers deletes members for one reason (the pool's deletion).
func (r *Reconciler) deleteMembers(ctx context.Context, p *kobev1.ClusterPool, members []kobev1.ClusterInstance, why string) (raced bool, err error) {
	for i := range members {
		lost, err := r.deleteMember(ctx, p, &members[i], kobev1.ReasonPoolDeleted, why)
		if err != nil {
			return raced, err
		}
		raced = raced || lost
	}
	return raced, nil
}

// deleteMember deletes m fenced by its UID and resourceVersion, so that a
// member bound to a lease since it was read is never deleted: its bind
// changed its resourceVersion. raced reports a member that changed or is
// gone. The event and the log say why (reason: ScaledDown, Outdated,
// IdleExpired, PoolDeleted).
func (r *Reconciler) deleteMember(ctx context.Context, p *kobev1.ClusterPool, m *kobev1.ClusterInstance, reason, why string) (raced bool, err error) {
	uid, rv := m.UID, m.ResourceVersion
	err = r.Client.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("deleting member %s (%s): %w", m.Name, reason, err)
	}
	r.expected.expect(p.UID, nil, []string{m.Name}, r.Clock.Now())
	ctrl.LoggerFrom(ctx).Info("Member deleted", "member", klog.KObj(m), "phase", m.Status.Phase, "reason", reason, "why", why)
	return false, nil
}

// ordinalsUsed remembers, per pool, the first ordinal of its reserved block
// this replica has not used. Only ever raised.
type ordinalsUsed struct {
	mu   sync.Mutex
	next map[types.UID]int32
}

func (o *ordinalsUsed) used(uid types.UID, next int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.next == nil {
		o.next = map[types.UID]int32{}
	}
	o.next[uid] = max(o.next[uid], next)
}

func (o *ordinalsUsed) firstFree(uid types.UID) int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.next[uid]
}

func (o *ordinalsUsed) forget(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.next, uid)
}
