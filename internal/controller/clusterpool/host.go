package clusterpool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// HostCap caps the members of one backend type that this host holds across
// every pool and namespace the operator sees: the local backend's members
// are processes on the operator's own machine.
type HostCap struct {
	// Max is the most members; 0 means no cap.
	Max int32
	// Setting names where Max comes from (the operator flag), quoted in the
	// Capacity condition of a pool it holds back.
	Setting string
}

// hostLedger makes the count-and-create of capped members atomic within
// this process. Reconciles of pools whose backend type is capped hold mu
// from the count to the last create, so that two pools reconciled at once
// cannot both take the last free place; created remembers members this
// process created until the cache shows them, so that a count made from a
// lagging cache still includes them. Another operator process (a second
// replica is never a leader at the same time) is not counted; the local
// backend refuses in Create as the last line.
type hostLedger struct {
	mu      sync.Mutex
	created map[types.UID]createdMember
}

type createdMember struct {
	typ kobev1.BackendType
	at  time.Time
}

// record notes a member of type t this process created at now. Callers hold mu.
func (l *hostLedger) record(uid types.UID, t kobev1.BackendType, now time.Time) {
	if l.created == nil {
		l.created = map[types.UID]createdMember{}
	}
	l.created[uid] = createdMember{typ: t, at: now}
}

// unseen counts the members of type t this process created that cached
// does not show yet, forgetting those it shows and those older than
// expectationTTL. Callers hold mu.
func (l *hostLedger) unseen(t kobev1.BackendType, cached map[types.UID]bool, now time.Time) int32 {
	var n int32
	for uid, c := range l.created {
		switch {
		case cached[uid] || now.Sub(c.at) > expectationTTL:
			delete(l.created, uid)
		case c.typ == t:
			n++
		}
	}
	return n
}

// hostCap is the cap on members of type t; Max 0 when there is none.
func (r *Reconciler) hostCap(t kobev1.BackendType) HostCap {
	c := r.HostCaps[t]
	if c.Max < 0 {
		c.Max = 0
	}
	return c
}

// hostBudget counts the members of the pool's backend type on this host:
// every ClusterInstance of that type in the cache, in any namespace, phase
// or pool, being deleted included, plus those this process created that
// the cache does not show yet. Callers of a capped type hold r.host.mu.
func (r *Reconciler) hostBudget(ctx context.Context, p *kobev1.ClusterPool, now time.Time) (pool.HostBudget, error) {
	t := p.Spec.Backend.Type
	hc := r.hostCap(t)
	if hc.Max == 0 || !p.DeletionTimestamp.IsZero() {
		// A pool being deleted creates nothing, and holds no lock (lockHost).
		return pool.HostBudget{}, nil
	}
	var list kobev1.ClusterInstanceList
	if err := r.Client.List(ctx, &list); err != nil {
		return pool.HostBudget{}, fmt.Errorf("counting the host's %s members: %w", t, err)
	}
	cached := make(map[types.UID]bool, len(list.Items))
	var n int32
	for i := range list.Items {
		cached[list.Items[i].UID] = true
		if list.Items[i].Spec.Backend.Type == t {
			n++
		}
	}
	n += r.host.unseen(t, cached, now)
	return pool.HostBudget{Max: hc.Max, Count: n, Setting: hc.Setting}, nil
}

// lockHost serialises the reconciles of pools whose backend type is capped
// (from the count to the last create); it returns the unlock.
func (r *Reconciler) lockHost(p *kobev1.ClusterPool) func() {
	if r.hostCap(p.Spec.Backend.Type).Max == 0 || !p.DeletionTimestamp.IsZero() {
		return func() {}
	}
	r.host.mu.Lock()
	return r.host.mu.Unlock
}

// poolsHeldBack maps a member that went away to the pools of its backend
// type that the host cap holds back: its place is free now.
func (r *Reconciler) poolsHeldBack(ctx context.Context, o client.Object) []reconcile.Request {
	m, ok := o.(*kobev1.ClusterInstance)
	if !ok || r.hostCap(m.Spec.Backend.Type).Max == 0 {
		return nil
	}
	var pools kobev1.ClusterPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil // the pools requeue on their own members' events
	}
	var out []reconcile.Request
	for i := range pools.Items {
		p := &pools.Items[i]
		c := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionCapacity)
		if p.Spec.Backend.Type == m.Spec.Backend.Type && c != nil && c.Reason == kobev1.ReasonHostCapacityReached {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return out
}
