package clusterinstance

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// drain takes n requests off q and returns their names in order.
func drain(t *testing.T, q priorityqueue.PriorityQueue[reconcile.Request], n int) []string {
	t.Helper()
	var out []string
	for range n {
		req, _, _ := q.GetWithPriority()
		out = append(out, req.Name)
		q.Done(req)
	}
	return out
}

func member(name string, phase kobev1.InstancePhase) *kobev1.ClusterInstance {
	return &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: kobev1.ClusterInstanceStatus{Phase: phase}}
}

// TestNewMembersFirst: of the member events queued while the controller
// runs, a member just created and not yet built is reconciled before the
// routine work queued ahead of it; a member of the initial list, or one
// that already has a phase, is not raised.
func TestNewMembersFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	forHandler := handler.WithLowPriorityWhenUnchanged(&handler.EnqueueRequestForObject{})
	mine := newMembersFirst()
	create := func(m *kobev1.ClusterInstance, initial bool) {
		e := event.CreateEvent{Object: client.Object(m), IsInInitialList: initial}
		forHandler.Create(t.Context(), e, q)
		mine.Create(t.Context(), e, q)
	}
	for _, name := range []string{"busy-1", "busy-2", "busy-3"} {
		// Routine work: a bound member's update, at the default priority.
		old, updated := member(name, kobev1.InstanceReady), member(name, kobev1.InstanceLeased)
		updated.ResourceVersion = "2"
		forHandler.Update(t.Context(), event.UpdateEvent{ObjectOld: old, ObjectNew: updated}, q)
	}
	create(member("ready", kobev1.InstanceReady), false)
	create(member("listed", ""), true)
	create(member("new", ""), false)

	got := drain(t, q, 6)
	if got[0] != "new" {
		t.Errorf("reconcile order %v, want the new member first", got)
	}
	if i := slices.Index(got, "listed"); i != len(got)-1 {
		t.Errorf("reconcile order %v, want the initial list's member last (low priority)", got)
	}
}

// TestEndedLeasesFirst: a lease that just ended has its members reconciled
// before the routine work queued ahead of them; other lease updates raise
// nothing.
func TestEndedLeasesFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	membersOf := func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "member-of-" + o.GetName()}}}
	}
	forHandler := handler.WithLowPriorityWhenUnchanged(&handler.EnqueueRequestForObject{})
	for _, name := range []string{"busy-1", "busy-2"} {
		old, updated := member(name, kobev1.InstanceReady), member(name, kobev1.InstanceLeased)
		updated.ResourceVersion = "2"
		forHandler.Update(t.Context(), event.UpdateEvent{ObjectOld: old, ObjectNew: updated}, q)
	}
	mine := endedLeasesFirst(membersOf)
	l := func(name string, phase kobev1.LeasePhase) *kobev1.ClusterLease {
		return &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Status: kobev1.ClusterLeaseStatus{Phase: phase}}
	}
	mine.Update(t.Context(), event.UpdateEvent{ObjectOld: l("extended", kobev1.LeaseBound), ObjectNew: l("extended", kobev1.LeaseBound)}, q)
	mine.Update(t.Context(), event.UpdateEvent{ObjectOld: l("gone-before", kobev1.LeaseReleased), ObjectNew: l("gone-before", kobev1.LeaseReleased)}, q)
	mine.Update(t.Context(), event.UpdateEvent{ObjectOld: l("released", kobev1.LeaseBound), ObjectNew: l("released", kobev1.LeaseReleased)}, q)

	if n := q.Len(); n != 3 {
		t.Fatalf("%d requests queued, want 3: the routine two and the released lease's member", n)
	}
	if got := drain(t, q, 3); got[0] != "member-of-released" {
		t.Errorf("reconcile order %v, want the released lease's member first", got)
	}
}
