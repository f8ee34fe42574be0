package clusterpool

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestMemberChanged(t *testing.T) {
	base := &kobev1.ClusterInstance{Status: kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady,
		LastHealthCheck: &metav1.Time{Time: time.Unix(100, 0)}}}
	cases := []struct {
		name string
		mut  func(*kobev1.ClusterInstance)
		want bool
	}{
		{"a successful probe", func(m *kobev1.ClusterInstance) { m.Status.LastHealthCheck = &metav1.Time{Time: time.Unix(130, 0)} }, false},
		{"a failed probe", func(m *kobev1.ClusterInstance) { m.Status.HealthFailures = 1 }, true},
		{"a phase change", func(m *kobev1.ClusterInstance) { m.Status.Phase = kobev1.InstanceLeased }, true},
		{"a bind", func(m *kobev1.ClusterInstance) { m.Spec.LeaseRef = &kobev1.LeaseBinding{Name: "l"} }, true},
		{"deletion", func(m *kobev1.ClusterInstance) { m.DeletionTimestamp = &metav1.Time{Time: time.Unix(200, 0)} }, true},
		{"a gate condition", func(m *kobev1.ClusterInstance) {
			m.Status.Conditions = []metav1.Condition{{Type: "ExternalSignal", Status: metav1.ConditionTrue}}
		}, true},
	}
	for _, c := range cases {
		n := base.DeepCopy()
		c.mut(n)
		if got := memberChanged(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != c.want {
			t.Errorf("%s: memberChanged = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestEventsWakeOnlyTheirPool: a member's or a lease's event enqueues the
// one pool it names, never every pool, so that the work an event causes
// does not grow with the number of pools.
func TestEventsWakeOnlyTheirPool(t *testing.T) {
	member := func(pool string) *kobev1.ClusterInstance {
		return &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool-" + pool + "-0",
			Labels: map[string]string{kobev1.LabelPool: pool}}}
	}
	leaseOf := func(pool string) *kobev1.ClusterLease {
		return &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lease-0"}, Spec: kobev1.ClusterLeaseSpec{Pool: pool}}
	}
	cases := []struct {
		name string
		h    handler.EventHandler
		old  client.Object
		cur  client.Object
		want []string
	}{
		{"a member", handler.EnqueueRequestsFromMapFunc(poolOfMember), member("a"), member("a"), []string{"a"}},
		{"a member without a pool label", handler.EnqueueRequestsFromMapFunc(poolOfMember),
			&kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}, &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}, nil},
		{"a lease", handler.EnqueueRequestsFromMapFunc(poolOfLease), leaseOf("b"), leaseOf("b"), []string{"b"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			c.h.Create(t.Context(), event.CreateEvent{Object: c.cur}, q)
			c.h.Update(t.Context(), event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.cur}, q)
			c.h.Delete(t.Context(), event.DeleteEvent{Object: c.cur}, q)
			var got []string
			for q.Len() > 0 {
				req, _ := q.Get()
				got = append(got, req.String())
				q.Done(req)
			}
			var want []string
			for _, p := range c.want {
				want = append(want, types.NamespacedName{Namespace: "ns", Name: p}.String())
			}
			if !slices.Equal(got, want) {
				t.Errorf("enqueued %v, want %v", got, want)
			}
		})
	}
}

// TestQueueChanged: of a lease's updates, only those that move it into or
// out of a pool's queue wake the pool; status churn of bound leases does
// not.
func TestQueueChanged(t *testing.T) {
	base := &kobev1.ClusterLease{Spec: kobev1.ClusterLeaseSpec{Pool: "a"}, Status: kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound}}
	cases := []struct {
		name string
		old  func(*kobev1.ClusterLease)
		mut  func(*kobev1.ClusterLease)
		want bool
	}{
		{"a bound lease extended", nil, func(l *kobev1.ClusterLease) { l.Status.Extensions = 1 }, false},
		{"a bound lease labelled", nil, func(l *kobev1.ClusterLease) { l.Labels = map[string]string{"x": "y"} }, false},
		{"a queued lease bound", func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeasePending }, nil, true},
		{"a new lease bound", func(l *kobev1.ClusterLease) { l.Status.Phase = "" }, nil, true},
		{"a queued lease deleted", func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeasePending },
			func(l *kobev1.ClusterLease) {
				l.Status.Phase = kobev1.LeasePending
				l.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
			}, true},
		{"a queued lease re-pointed", func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeasePending },
			func(l *kobev1.ClusterLease) { l.Status.Phase = kobev1.LeasePending; l.Spec.Pool = "b" }, true},
	}
	for _, c := range cases {
		o, n := base.DeepCopy(), base.DeepCopy()
		if c.old != nil {
			c.old(o)
		}
		if c.mut != nil {
			c.mut(n)
		}
		if got := queueChanged(event.UpdateEvent{ObjectOld: o, ObjectNew: n}); got != c.want {
			t.Errorf("%s: queueChanged = %v, want %v", c.name, got, c.want)
		}
	}
}
