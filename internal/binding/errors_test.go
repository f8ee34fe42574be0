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
)

// TestBindSaysWhyItFailed is a unit test of one step: when the API server
// refuses a write for a reason other than a race, Bind reports that reason
// (so the lease controller logs it and backs off) instead of "no ready
// member", and it rolls the lease back. Races themselves are proven against
// the real API server in TestConcurrentBindsNeverDoubleBook.
func TestBindSaysWhyItFailed(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: kobev1.GroupVersion.Group, Resource: "clusterinstances"}, "m", errors.New("RBAC says no"))
	conflict := apierrors.NewConflict(schema.GroupResource{Group: kobev1.GroupVersion.Group, Resource: "clusterleases"}, "l", errors.New("changed"))
	unavailable := apierrors.NewServiceUnavailable("etcd is unhappy")
	tests := []struct {
		name         string
		memberUpdate error // returned by every member Update
		leaseStatus  error // returned by the lease's first status write
		noMembers    bool
		wantLostRace bool
		wantIs       error
		wantText     string
	}{
		{"member write forbidden", forbidden, nil, false, false, nil, "RBAC says no"},
		{"lease claim refused by the API server", nil, unavailable, false, false, nil, "etcd is unhappy"},
		{"lease changed under the binder", nil, conflict, false, true, binding.ErrLeaseChanged, ""},
		{"no ready member at all", nil, nil, true, true, binding.ErrNoReadyMember, ""},
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
				objs = append(objs, &kobev1.ClusterInstance{
					ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "default", UID: "m-uid", Labels: map[string]string{kobev1.LabelPool: "p"}},
					Status:     kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady},
				})
			}
			leaseWrites := 0
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&kobev1.ClusterLease{}, &kobev1.ClusterInstance{}).
				WithInterceptorFuncs(interceptor.Funcs{
					Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
						if _, ok := o.(*kobev1.ClusterInstance); ok && tt.memberUpdate != nil {
							return tt.memberUpdate
						}
						return c.Update(ctx, o, opts...)
					},
					SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
						if _, ok := o.(*kobev1.ClusterLease); ok {
							leaseWrites++
							if leaseWrites == 1 && tt.leaseStatus != nil {
								return tt.leaseStatus
							}
						}
						return c.SubResource(sub).Update(ctx, o, opts...)
					},
				}).Build()
			fresh := &kobev1.ClusterLease{}
			if err := c.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: "l"}, fresh); err != nil {
				t.Fatal(err)
			}
			b := &binding.Binder{Client: c, Reader: c, Clock: clocktesting.NewFakePassiveClock(time.Now())}
			_, err := b.Bind(t.Context(), fresh, time.Hour)
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
			// Whatever happened, the lease is not left claiming a member.
			stored := &kobev1.ClusterLease{}
			if err := c.Get(t.Context(), types.NamespacedName{Namespace: "default", Name: "l"}, stored); err != nil {
				t.Fatal(err)
			}
			if stored.Status.Phase == kobev1.LeaseBound || stored.Status.InstanceRef != nil {
				t.Errorf("lease after a failed bind: %+v, want not bound", stored.Status)
			}
		})
	}
}
