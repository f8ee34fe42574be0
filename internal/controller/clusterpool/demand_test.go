//go:build heavy

package clusterpool

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestDemandMeasuredAndKept runs the pool and instance controllers with the
// sim backend: the leases of a scaling pool are counted once in
// status.demand with the time its members took to be Ready, the warm target
// is published, and a fresh operator (a restart) continues the history from
// the API: leases deleted meanwhile stay counted, new ones are added.
// The leases stay queued (no lease controller runs), so the pool grows to
// maxClusters; that is not what is tested here.
func TestDemandMeasuredAndKept(t *testing.T) {
	env := testenv.Shared(t)
	ctx, c := t.Context(), env.Client
	ns := env.NewNamespace(t)
	start := func() (stop func()) {
		mgr := env.NewManager(t, ns)
		addSimControllers(t, mgr)
		run, err := testenv.RunManager(mgr)
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		stop = func() {
			once.Do(func() {
				if err := run(); err != nil {
					t.Errorf("manager: %v", err)
				}
			})
		}
		t.Cleanup(stop)
		return stop
	}

	// A 10m window: 50 s buckets, none of which leaves the window during
	// the test.
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "demand", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{
			Backend: kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: 2 * time.Second}}},
			Scaling: &kobev1.ScalingSpec{Mode: kobev1.ScalingReactive, MinReady: ptr.To[int32](1), MaxClusters: ptr.To[int32](2),
				PredictiveWindow: &metav1.Duration{Duration: 10 * time.Minute}}}}
	stop := start()
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	var leases []*kobev1.ClusterLease
	newLeases := func(n int) {
		for range n {
			l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{GenerateName: "l-", Namespace: ns}, Spec: kobev1.ClusterLeaseSpec{Pool: p.Name}}
			if err := c.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
			leases = append(leases, l)
		}
	}
	newLeases(6)
	first := waitDemand(t, c, p, leases)
	if first.ProvisionSeconds <= 0 {
		t.Errorf("provisionSeconds %d: the members' times to Ready were not measured", first.ProvisionSeconds)
	}
	if first.WarmTarget <= 0 {
		t.Errorf("warmTarget %d with %d leases counted", first.WarmTarget, len(leases))
	}

	// The counted leases go away, and so does the operator.
	for _, l := range leases {
		if err := c.Delete(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, shortWait, "the leases deleted", func() error {
		var list kobev1.ClusterLeaseList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d leases left", len(list.Items))
		}
		return nil
	})
	stop()

	// A fresh operator has only the API: the history of the 6 deleted
	// leases is still there, and 2 new ones are added to it.
	start()
	newLeases(2)
	if second := waitDemand(t, c, p, leases); second.WarmTarget < first.WarmTarget {
		t.Errorf("warmTarget fell from %d to %d although every arrival is still inside the window", first.WarmTarget, second.WarmTarget)
	}
}

// waitDemand waits until the pool's status.demand counts exactly the
// leases, in the buckets their creation times fall in, with the warm target
// that follows from them, and returns it.
func waitDemand(t *testing.T, c client.Client, p *kobev1.ClusterPool, leases []*kobev1.ClusterLease) *kobev1.DemandStatus {
	t.Helper()
	var d *kobev1.DemandStatus
	testenv.Eventually(t, shortWait, fmt.Sprintf("status.demand to count %d leases", len(leases)), func() error {
		got := &kobev1.ClusterPool{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		d = got.Status.Demand
		if d == nil {
			return fmt.Errorf("no status.demand; status %+v", got.Status)
		}
		if d.Window.Duration != 10*time.Minute || d.BucketSeconds != 50 {
			return fmt.Errorf("window %s bucketSeconds %d, want 10m, 50", d.Window.Duration, d.BucketSeconds)
		}
		want := map[int64]int32{}
		var newest time.Time
		for _, l := range leases {
			ts := l.CreationTimestamp.Time
			want[ts.Unix()-ts.Unix()%50]++
			if ts.After(newest) {
				newest = ts
			}
		}
		got2 := map[int64]int32{}
		var peak int32
		for _, b := range d.Arrivals {
			got2[b.Start.Unix()] += b.Count
			peak = max(peak, b.Count)
		}
		if fmt.Sprint(got2) != fmt.Sprint(want) {
			return fmt.Errorf("arrivals %v, want %v (by bucket start)", got2, want)
		}
		if d.CountedThrough == nil || !d.CountedThrough.Time.Equal(newest) {
			return fmt.Errorf("countedThrough %v, want %s", d.CountedThrough, newest)
		}
		if d.ProvisionSeconds <= 0 {
			return fmt.Errorf("provisionSeconds %d: no member Ready yet", d.ProvisionSeconds)
		}
		if w := (peak*d.ProvisionSeconds + 49) / 50; d.WarmTarget != w {
			return fmt.Errorf("warmTarget %d, want ceil(%d x %d / 50) = %d", d.WarmTarget, peak, d.ProvisionSeconds, w)
		}
		if r := fmt.Sprintf("%.2f", float64(peak)*60/50); d.PeakArrivalsPerMinute != r {
			return fmt.Errorf("peakArrivalsPerMinute %q, want %q", d.PeakArrivalsPerMinute, r)
		}
		return nil
	})
	// Counted once: it stays as it is while nothing new arrives (a lease
	// counted twice would show only later).
	testenv.Consistently(t, 3*time.Second, "the arrivals to stay as they are with no new lease", func() error {
		got := &kobev1.ClusterPool{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		if got.Status.Demand == nil || fmt.Sprint(got.Status.Demand.Arrivals) != fmt.Sprint(d.Arrivals) {
			return fmt.Errorf("arrivals moved with no new lease: %+v, then %+v", d.Arrivals, got.Status.Demand)
		}
		return nil
	})
	return d
}
