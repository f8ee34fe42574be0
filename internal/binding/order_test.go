package binding_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// TestBindPrefersTheCurrentTemplate is a unit test of the choice of member:
// while a member built from the pool's current template is Ready, a lease
// never gets one built from an older template; with only outdated members
// Ready, it gets one of those rather than waiting; with the pool unreadable,
// it still binds. Each case runs many times because the order within a group
// is random: a binder without the preference picks the outdated member half
// of the time.
func TestBindPrefersTheCurrentTemplate(t *testing.T) {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "pool-uid"},
		Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}, Cluster: kobev1.ClusterTemplate{Version: "1.33.1"}}}
	current := pool.TemplateHash(&p.Spec)
	member := func(name, hash string) *kobev1.ClusterInstance {
		return &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"), Labels: map[string]string{kobev1.LabelPool: "p"}},
			Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "p", UID: p.UID}, TemplateHash: hash},
			Status:     kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady},
		}
	}
	tests := []struct {
		name    string
		objs    func() []client.Object
		allowed map[string]bool // members the bind may take
	}{
		{"one outdated and one current member: the current one", func() []client.Object {
			return []client.Object{p.DeepCopy(), member("old", "outdated-hash"), member("new", current)}
		}, map[string]bool{"new": true}},
		{"several of each: a current one", func() []client.Object {
			return []client.Object{p.DeepCopy(), member("old-1", "outdated-hash"), member("old-2", ""), member("old-3", "outdated-hash"),
				member("new-1", current), member("new-2", current)}
		}, map[string]bool{"new-1": true, "new-2": true}},
		{"only outdated members: one of them, not a wait", func() []client.Object {
			return []client.Object{p.DeepCopy(), member("old-1", "outdated-hash"), member("old-2", "outdated-hash")}
		}, map[string]bool{"old-1": true, "old-2": true}},
		{"the pool unreadable: any member", func() []client.Object {
			return []client.Object{member("old", "outdated-hash"), member("new", current)}
		}, map[string]bool{"old": true, "new": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]int{}
			for range 64 {
				c := orderClient(t, tt.objs())
				l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "default", UID: "lease-uid"}, Spec: kobev1.ClusterLeaseSpec{Pool: "p"}}
				b := &binding.Binder{Client: c, Reader: c, Clock: clocktesting.NewFakePassiveClock(time.Now())}
				res, err := b.Bind(t.Context(), l)
				if err != nil {
					t.Fatalf("Bind: %v", err)
				}
				got[res.Instance.Name]++
			}
			for name, n := range got {
				if !tt.allowed[name] {
					t.Errorf("%d of 64 binds took %s; allowed: %v (all binds: %v)", n, name, tt.allowed, got)
				}
			}
		})
	}
}

func orderClient(t *testing.T, objs []client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := kobev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&kobev1.ClusterLease{}, &kobev1.ClusterInstance{}, &kobev1.ClusterPool{}).
		WithIndex(&kobev1.ClusterLease{}, index.LeaseInstanceUID, index.LeaseInstance).
		WithIndex(&kobev1.ClusterInstance{}, index.InstancePool, index.InstancePoolName).
		Build()
}
