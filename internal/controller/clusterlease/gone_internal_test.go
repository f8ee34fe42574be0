package clusterlease

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/controller/patch"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestDeletedMemberNeedsNoLiveRead: the member an ended lease held is
// deleted (its teardown); the deletion's event wakes the lease, whose
// reconcile must not read the member live to find it gone (one GET of the
// host API server per lease-and-release cycle). A member the cache lacks
// without having shown the deletion of that very member (its UID) is still
// read live.
func TestDeletedMemberNeedsNoLiveRead(t *testing.T) {
	ended := &kobev1.ClusterLease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", UID: "l-uid"},
		Status: kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseReleased,
			InstanceRef: &kobev1.ObjectRef{Name: "m", UID: "m-uid"}},
	}
	member := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "m-uid"},
		Spec:       kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: "l", UID: "l-uid"}},
	}
	setup := func(t *testing.T, live ...client.Object) (*Reconciler, *int, *scope) {
		cache := fake.NewClientBuilder().WithScheme(testenv.Scheme()).Build()
		gets := 0
		apiReader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(live...).
			WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				gets++
				return c.Get(ctx, key, obj, opts...)
			}}).Build()
		l := ended.DeepCopy()
		return &Reconciler{Client: cache, APIReader: apiReader}, &gets, &scope{lease: l, patch: patch.New(cache, l)}
	}

	t.Run("the cache showed its deletion: no live read, and its lease is woken", func(t *testing.T) {
		r, gets, s := setup(t)
		q := priorityqueue.New[reconcile.Request]("test")
		defer q.ShutDown()
		gone := member.DeepCopy()
		gone.DeletionTimestamp = ptr.To(metav1.Now())
		gone.Finalizers = []string{kobev1.FinalizerInstance}
		r.memberEvents().Delete(t.Context(), event.DeleteEvent{Object: gone}, q)
		if req, _, _ := q.GetWithPriority(); req.NamespacedName != (types.NamespacedName{Namespace: "ns", Name: "l"}) {
			t.Errorf("the deletion woke %v, want lease ns/l", req)
		}
		if err := r.recycleUnclaimed(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if *gets != 0 {
			t.Errorf("%d live reads of a member whose deletion the cache showed, want 0", *gets)
		}
	})
	t.Run("another member of that name went: read live", func(t *testing.T) {
		r, gets, s := setup(t)
		other := member.DeepCopy()
		other.UID = "another-uid"
		r.memberEvents().Delete(t.Context(), event.DeleteEvent{Object: other}, priorityqueue.New[reconcile.Request]("test"))
		if err := r.recycleUnclaimed(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if *gets != 1 {
			t.Errorf("%d live reads, want 1", *gets)
		}
	})
	t.Run("not in the cache, its deletion never seen: read live", func(t *testing.T) {
		r, gets, s := setup(t, member.DeepCopy())
		if err := r.recycleUnclaimed(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		if *gets != 1 {
			t.Errorf("%d live reads, want 1", *gets)
		}
	})
}
