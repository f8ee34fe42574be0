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
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestConcurrentBindsNeverDoubleBook races many leases, each with its own
// Binder (as if on its own replica), for fewer members than leases, against
// a real API server: every member ends with at most one lease, every lease
// with at most one member, and both sides of every binding agree.
func TestConcurrentBindsNeverDoubleBook(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	const members, leases = 5, 24

	pool := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "race", Namespace: "default"}, Spec: kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	must(t, c.Create(ctx, pool))
	for i := 0; i < members; i++ {
		inst := &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-race-%d", i), Namespace: "default", Labels: map[string]string{kobev1.LabelPool: "race"}},
			Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "race", UID: pool.UID}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
		}
		must(t, c.Create(ctx, inst))
		inst.Status.Phase = kobev1.InstanceReady
		must(t, c.Status().Update(ctx, inst))
	}
	ls := make([]*kobev1.ClusterLease, leases)
	for i := range ls {
		ls[i] = &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lease-%02d", i), Namespace: "default"}, Spec: kobev1.ClusterLeaseSpec{Pool: "race"}}
		must(t, c.Create(ctx, ls[i]))
	}

	// Each lease is bound by two binders at once (API fast path and
	// controller), each binder with its own in-flight set (other replicas).
	var wg sync.WaitGroup
	errs := make(chan error, 2*leases)
	for i := range ls {
		for range 2 {
			wg.Add(1)
			go func(l kobev1.ClusterLease) {
				defer wg.Done()
				b := &binding.Binder{Client: c, Reader: c, Clock: clock.RealClock{}}
				if _, err := b.Bind(ctx, &l, time.Hour); err != nil {
					errs <- err
				}
			}(*ls[i].DeepCopy())
		}
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
		if inst.Spec.LeaseRef == nil {
			t.Errorf("member %s was left unbound with %d leases competing", inst.Name, leases)
			continue
		}
		if prev, dup := memberOfLease[inst.Spec.LeaseRef.Name]; dup {
			t.Errorf("lease %s holds two members: %s and %s", inst.Spec.LeaseRef.Name, prev, inst.Name)
		}
		memberOfLease[inst.Spec.LeaseRef.Name] = inst.Name
		l := leaseByName[inst.Spec.LeaseRef.Name]
		if l == nil || !binding.Consistent(l, &inst) || l.Status.Phase != kobev1.LeaseBound {
			t.Errorf("member %s points at lease %s, which does not point back (%+v)", inst.Name, inst.Spec.LeaseRef.Name, l.Status)
		}
	}
	bound := 0
	for _, l := range gotLeases.Items {
		if l.Status.Phase == kobev1.LeaseBound {
			bound++
			if memberOfLease[l.Name] != l.Status.InstanceRef.Name {
				t.Errorf("lease %s says it holds %s, but that member does not point back", l.Name, l.Status.InstanceRef.Name)
			}
		} else if l.Status.InstanceRef != nil {
			t.Errorf("unbound lease %s still names member %s", l.Name, l.Status.InstanceRef.Name)
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
