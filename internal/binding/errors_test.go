package binding_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/index"
)

// TestBindSaysWhyItFailed is a unit test of one step: when the API server
// refuses the member's claim for a reason other than a race, Bind reports
// that reason (so the lease controller logs it and backs off) instead of
// "no ready member"; when the claim's outcome is unknown (a 5xx, a timeout)
// it says so with ErrUncertain and tries no other member; and a member that
// some lease's status names is never claimed. Bind never writes the lease.
// Races themselves are proven against the real API server in
// TestConcurrentBindsNeverDoubleBook.
func TestBindSaysWhyItFailed(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: kobev1.GroupVersion.Group, Resource: "clusterinstances"}, "m", errors.New("RBAC says no"))
	conflict := apierrors.NewConflict(schema.GroupResource{Group: kobev1.GroupVersion.Group, Resource: "clusterinstances"}, "m", errors.New("changed"))
	unavailable := apierrors.NewServiceUnavailable("etcd is unhappy")
	tests := []struct {
		name         string
		memberUpdate error // returned by every member Update
		noMembers    bool
		namedBy      bool // another lease's status names the member
		wantLostRace bool
		wantIs       error
		wantText     string
		wantUpdates  int
	}{
		{"member write forbidden", forbidden, false, false, false, nil, "RBAC says no", 2},
		{"member write outcome unknown (5xx)", unavailable, false, false, false, binding.ErrUncertain, "etcd is unhappy", 1},
		{"member write outcome unknown (deadline)", context.DeadlineExceeded, false, false, false, binding.ErrUncertain, "deadline", 1},
		{"member changed under the binder", conflict, false, false, true, binding.ErrNoReadyMember, "", 4},
		{"no ready member at all", nil, true, false, true, binding.ErrNoReadyMember, "", 0},
		{"the only member is named by a lease's status", nil, false, true, true, binding.ErrNoReadyMember, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := kobev1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "default", UID: "lease-uid"}, Spec: kobev1.ClusterLeaseSpec{Pool: "p"}}
			objs := []client.Object{l}
			if !tt.noMembers {
				// Two members: a failure that is not a lost race must stop
				// at the first only when its outcome is unknown.
				for _, n := range []string{"m1", "m2"} {
					objs = append(objs, &kobev1.ClusterInstance{
						ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default", UID: types.UID(n + "-uid"), Labels: map[string]string{kobev1.LabelPool: "p"}},
						Status:     kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady},
					})
				}
			}
			if tt.namedBy {
				objs = objs[:2] // one member only
				objs = append(objs, &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "default", UID: "forged-uid"},
					Status: kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: "m1", UID: "m1-uid"}}})
			}
			updates, leaseWrites := 0, 0
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&kobev1.ClusterLease{}, &kobev1.ClusterInstance{}).
				WithIndex(&kobev1.ClusterLease{}, index.LeaseInstanceUID, index.LeaseInstance).
				WithIndex(&kobev1.ClusterInstance{}, index.InstancePool, index.InstancePoolName).
				WithInterceptorFuncs(interceptor.Funcs{
					Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
						if _, ok := o.(*kobev1.ClusterInstance); ok {
							updates++
							if tt.memberUpdate != nil {
								return tt.memberUpdate
							}
						}
						return c.Update(ctx, o, opts...)
					},
					SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
						leaseWrites++
						return c.SubResource(sub).Update(ctx, o, opts...)
					},
				}).Build()
			fresh := &kobev1.ClusterLease{}
			if err := c.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: "l"}, fresh); err != nil {
				t.Fatal(err)
			}
			b := &binding.Binder{Client: c, Reader: c, Clock: clocktesting.NewFakePassiveClock(time.Now())}
			_, err := b.Bind(t.Context(), fresh)
			if err == nil {
				t.Fatal("Bind succeeded, want a failure")
			}
			if got := binding.LostRace(err); got != tt.wantLostRace {
				t.Errorf("LostRace(%v) = %v, want %v", err, got, tt.wantLostRace)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want %v", err, tt.wantIs)
			}
			if tt.wantText != "" && !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("err = %v, want it to carry %q", err, tt.wantText)
			}
			if updates != tt.wantUpdates {
				t.Errorf("%d member writes, want %d", updates, tt.wantUpdates)
			}
			if leaseWrites != 0 {
				t.Errorf("Bind wrote the lease's status %d times; it must never write it", leaseWrites)
			}
			var ms kobev1.ClusterInstanceList
			if err := c.List(t.Context(), &ms); err != nil {
				t.Fatal(err)
			}
			for _, m := range ms.Items {
				if m.Spec.LeaseRef != nil {
					t.Errorf("member %s names lease %s after a failed bind", m.Name, m.Spec.LeaseRef.Name)
				}
			}
		})
	}
}
