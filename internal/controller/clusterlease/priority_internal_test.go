package clusterlease

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// TestActiveLeasesFirstAtStart: of the leases a new leader's controller
// finds, the ended ones (queued at low priority, as controller-runtime queues
// every lease of the initial list) come after those that must still bind or
// end, whatever order the list gave them in.
func TestActiveLeasesFirstAtStart(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	forHandler := handler.WithLowPriorityWhenUnchanged(&handler.EnqueueRequestForObject{})
	mine := activeFirst()
	leases := []struct {
		name  string
		phase kobev1.LeasePhase
	}{
		{"ended-1", kobev1.LeaseReleased}, {"ended-2", kobev1.LeaseExpired}, {"bound-expired", kobev1.LeaseBound},
		{"ended-3", kobev1.LeaseReleased}, {"pending", kobev1.LeasePending}, {"new", ""},
	}
	for _, l := range leases {
		obj := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: "ns"}, Status: kobev1.ClusterLeaseStatus{Phase: l.phase}}
		e := event.CreateEvent{Object: client.Object(obj), IsInInitialList: true}
		forHandler.Create(t.Context(), e, q)
		mine.Create(t.Context(), e, q)
	}
	var order []string
	for range leases {
		req, prio, _ := q.GetWithPriority()
		order = append(order, req.Name)
		q.Done(req)
		if want := -100; prio != want && strings.HasPrefix(req.Name, "ended") {
			t.Errorf("%s reconciled at priority %d, want %d", req.Name, prio, want)
		}
	}
	want := []string{"bound-expired", "pending", "new", "ended-1", "ended-2", "ended-3"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("reconcile order %v, want %v", order, want)
		}
	}

	// After the start, a lease's events come at the default priority,
	// ended or not: activeFirst adds nothing.
	ended := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: "ns"}, Status: kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseReleased}}
	mine.Create(t.Context(), event.CreateEvent{Object: ended}, q)
	if n := q.Len(); n != 0 {
		t.Errorf("activeFirst queued %d leases outside the initial list", n)
	}
}
