package clusterinstance

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// priorityUrgent is the queue priority of the two kinds of member work that
// must not wait behind the rest. Under churn the member queue holds a
// second or more of work (make bench, 16 callers leasing and releasing: 130
// members waiting, about 120 reconciles a second): most of it is routine
// (a bind seen, a Leased phase written, a teardown's next step), and a new
// member waited 1.2 s (p50) for its first reconcile, so a pool of 64
// drained and a lease in twelve waited for the refill.
//   - A member just created, not yet built: the refill that the pool's
//     next hand-outs wait for.
//   - A member whose lease just ended: its fence is what ends the holder's
//     access to it.
const priorityUrgent = 1

// addUrgent queues reqs at priorityUrgent (a plain Add on a queue without
// priorities). An item already queued keeps the higher of its priorities.
func addUrgent(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs ...reconcile.Request) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priorityUrgent)}, reqs...)
		return
	}
	for _, r := range reqs {
		q.Add(r)
	}
}

// newMembersFirst queues a member created while the controller runs, not
// yet built, at priorityUrgent. It adds to the For watch's own handler;
// the members of an initial list (a new leader) come as that handler says.
func newMembersFirst() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			m, ok := e.Object.(*kobev1.ClusterInstance)
			if !ok || e.IsInInitialList || m.Status.Phase != "" || !m.DeletionTimestamp.IsZero() {
				return
			}
			addUrgent(q, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
		},
	}
}

// endedLeasesFirst queues the members of a lease that just ended at
// priorityUrgent; members maps a lease to them (instancesOfLease). It adds
// to the lease watch's own handler, which queues every other lease event.
func endedLeasesFirst(members handler.MapFunc) handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			before, ok := e.ObjectOld.(*kobev1.ClusterLease)
			after, ok2 := e.ObjectNew.(*kobev1.ClusterLease)
			if !ok || !ok2 || !lease.IsEnded(after.Status.Phase) || lease.IsEnded(before.Status.Phase) {
				return
			}
			addUrgent(q, members(ctx, after)...)
		},
	}
}
