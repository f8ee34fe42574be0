//go:build integration

package binding_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestConcurrentBindsNeverDoubleBook races many leases for fewer members,
// each lease bound by its own Binder (as if on its own replica, with its own
// in-flight set), against a real API server, each winner recording the bind
// on its lease as the API and the controller do: every member ends with at
// most one lease, every lease with at most one member, both sides of every
// binding agree, and a member some lease's status names is never claimed.
func TestConcurrentBindsNeverDoubleBook(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	mgr := env.NewManager(t, "default")
	if err := index.Setup(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	const members, leases = 5, 24

	pool := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "race", Namespace: "default"}, Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	must(t, c.Create(ctx, pool))
	var forbidden *kobev1.ClusterInstance
	for i := 0; i < members+1; i++ {
		inst := &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-race-%d", i), Namespace: "default", Labels: map[string]string{kobev1.LabelPool: "race"}},
			Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "race", UID: pool.UID}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
		}
		must(t, c.Create(ctx, inst))
		inst.Status.Phase = kobev1.InstanceReady
		must(t, c.Status().Update(ctx, inst))
		forbidden = inst
	}
	// The last member is named by a lease's status (forged): never claimed.
	forged := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "default"}, Spec: kobev1.ClusterLeaseSpec{Pool: "elsewhere"}}
	must(t, c.Create(ctx, forged))
	forged.Status = kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: forbidden.Name, UID: forbidden.UID}}
	must(t, c.Status().Update(ctx, forged))

	ls := make([]*kobev1.ClusterLease, leases)
	for i := range ls {
		ls[i] = &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lease-%02d", i), Namespace: "default"}, Spec: kobev1.ClusterLeaseSpec{Pool: "race"}}
		must(t, c.Create(ctx, ls[i]))
	}
	testenv.Eventually(t, 15*time.Second, "the cache to see every member and the forged lease", func() error {
		var got kobev1.ClusterLeaseList
		if err := mgr.GetClient().List(ctx, &got, client.InNamespace("default"), client.MatchingFields{index.LeaseInstanceUID: string(forbidden.UID)}); err != nil {
			return err
		}
		var insts kobev1.ClusterInstanceList
		if err := mgr.GetClient().List(ctx, &insts, client.InNamespace("default")); err != nil {
			return err
		}
		if len(got.Items) != 1 || len(insts.Items) != members+1 {
			return fmt.Errorf("%d leases name the forbidden member, %d members", len(got.Items), len(insts.Items))
		}
		return nil
	})

	var wg sync.WaitGroup
	errs := make(chan error, leases)
	for i := range ls {
		wg.Go(func() {
			l := ls[i].DeepCopy()
			b := &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clock.RealClock{}}
			res, err := b.Bind(ctx, l)
			if err != nil {
				errs <- err
				return
			}
			binding.RecordBound(l, res.Instance, time.Hour)
			if err := c.Status().Update(ctx, l); err != nil {
				errs <- fmt.Errorf("recording %s: %w", l.Name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	// Losing is normal here; anything else would be a real failure that the
	// lease controller would report and back off from.
	for err := range errs {
		if !binding.LostRace(err) {
			t.Errorf("a bind failed for a reason other than a lost race: %v", err)
		}
	}

	var gotInst kobev1.ClusterInstanceList
	must(t, c.List(ctx, &gotInst, client.InNamespace("default")))
	var gotLeases kobev1.ClusterLeaseList
	must(t, c.List(ctx, &gotLeases, client.InNamespace("default")))

	leaseByName := map[string]*kobev1.ClusterLease{}
	for i := range gotLeases.Items {
		leaseByName[gotLeases.Items[i].Name] = &gotLeases.Items[i]
	}
	memberOfLease := map[string]string{}
	for _, inst := range gotInst.Items {
		if inst.Name == forbidden.Name {
			if inst.Spec.LeaseRef != nil {
				t.Errorf("member %s, named by a forged lease status, was claimed by %s", inst.Name, inst.Spec.LeaseRef.Name)
			}
			continue
		}
		if inst.Spec.LeaseRef == nil {
			t.Errorf("member %s was left unbound with %d leases competing", inst.Name, leases)
			continue
		}
		if inst.Spec.LeaseRef.BoundAt == nil {
			t.Errorf("member %s records no boundAt", inst.Name)
		}
		if prev, dup := memberOfLease[inst.Spec.LeaseRef.Name]; dup {
			t.Errorf("lease %s holds two members: %s and %s", inst.Spec.LeaseRef.Name, prev, inst.Name)
		}
		memberOfLease[inst.Spec.LeaseRef.Name] = inst.Name
		l := leaseByName[inst.Spec.LeaseRef.Name]
		if l == nil || !binding.Consistent(l, &inst) || l.Status.Phase != kobev1.LeaseBound {
			t.Errorf("member %s points at lease %s, whose status does not point back", inst.Name, inst.Spec.LeaseRef.Name)
			continue
		}
		if got := l.Status.ExpiresAt.Sub(inst.Spec.LeaseRef.BoundAt.Time); got != time.Hour {
			t.Errorf("lease %s expires %s after its member's boundAt, want 1h", l.Name, got)
		}
	}
	bound := 0
	for _, l := range gotLeases.Items {
		if l.Name == forged.Name {
			continue
		}
		if l.Status.Phase == kobev1.LeaseBound {
			bound++
			if memberOfLease[l.Name] != l.Status.InstanceRef.Name {
				t.Errorf("lease %s says it holds %s, but that member does not point back", l.Name, l.Status.InstanceRef.Name)
			}
		} else if l.Status.InstanceRef != nil {
			t.Errorf("unbound lease %s names member %s", l.Name, l.Status.InstanceRef.Name)
		}
	}
	if bound != members {
		t.Errorf("%d leases bound, want exactly %d (one per member)", bound, members)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
