//go:build heavy

package scaling

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestPredictiveTargetFollowsArrivalsAndSurvivesRestart: a Predictive pool
// measures lease arrivals (through the real API) and its members' time to
// Ready; status.demand.warmTarget follows a rising arrival rate and the
// pool builds members to meet it; the demand history lives in the pool's
// status, so a restarted operator neither loses nor recounts it and keeps
// aiming for it; once no lease arrived for a whole window, the target falls
// and the pool shrinks back to minReady.
//
// It runs an operator of its own, in a namespace of its own, so that the
// restart disturbs no other scenario.
func TestPredictiveTargetFollowsArrivalsAndSurvivesRestart(t *testing.T) {
	t.Parallel()
	const (
		name        = "predictive"
		maxClusters = 10
		window      = time.Minute
		bucket      = 5 * time.Second // window / 12
		// readyAfter makes a member take about this long to provision,
		// so that the rates below ask for targets well inside maxClusters.
		readyAfter = 8 * time.Second
	)
	start := time.Now()
	ns, token := ownNamespace(t)
	op := startOperator(t, ns, token)
	p := simPool(ns, name, kobev1.SimBackendSpec{ReadyAfter: dur(readyAfter)})
	p.Spec.Scaling = &kobev1.ScalingSpec{
		Mode:             kobev1.ScalingPredictive,
		MinReady:         ptr.To[int32](1),
		MaxClusters:      ptr.To[int32](maxClusters),
		PredictiveWindow: dur(window),
		ScaleDownAfter:   dur(5 * time.Second),
	}
	createPool(t, p)

	// The first member's time to Ready is the provisioning time.
	waitPool(t, ns, name, time.Minute, "a measured provisioning time", func(p *kobev1.ClusterPool) error {
		d := p.Status.Demand
		if p.Status.Ready < 1 || d == nil || d.ProvisionSeconds == 0 {
			return errors.New("no provisioning time yet")
		}
		if d.Window.Duration != window || d.BucketSeconds != int32(bucket/time.Second) {
			return fmt.Errorf("demand window %s, bucketSeconds %d; want %s, %d", d.Window.Duration, d.BucketSeconds, window, bucket/time.Second)
		}
		return nil
	})
	t.Logf("%s: first member Ready", since(start))

	// A low rate: one lease in each of three buckets.
	arrive := func(n int) []wire.Lease {
		var ls []wire.Lease
		for range n {
			l := op.api.lease(t, name)
			op.api.release(t, l.ID)
			ls = append(ls, l)
		}
		return ls
	}
	for i := range 3 {
		if i > 0 {
			time.Sleep(bucket + time.Second)
		}
		arrive(1)
	}
	low := waitDemand(t, ns, name, 3)
	if peak := maxCount(low.Status.Demand); peak != 1 {
		t.Fatalf("leases 6 s apart share a bucket: arrivals %+v", low.Status.Demand.Arrivals)
	}
	t.Logf("%s: low rate: %s", since(start), brief(low))

	// A higher rate: four leases within one bucket (starting just after a
	// bucket boundary: buckets are aligned to the Unix epoch).
	next := time.Unix(time.Now().Unix()/5*5+5, int64(300*time.Millisecond))
	time.Sleep(time.Until(next))
	arrive(4)
	high := waitDemand(t, ns, name, 7)
	d := high.Status.Demand
	if maxCount(d) < 2 {
		t.Fatalf("four leases in a row spread over four buckets: %+v", d.Arrivals)
	}
	if d.WarmTarget <= low.Status.Demand.WarmTarget {
		t.Fatalf("warmTarget %d did not rise above %d with the arrival rate; %s", d.WarmTarget, low.Status.Demand.WarmTarget, brief(high))
	}
	want := min(d.WarmTarget, maxClusters)
	t.Logf("%s: high rate: %s", since(start), brief(high))
	waitPool(t, ns, name, time.Minute, fmt.Sprintf("%d members Ready, the measured warm target", want), func(p *kobev1.ClusterPool) error {
		if p.Status.Ready < want {
			return fmt.Errorf("%d Ready", p.Status.Ready)
		}
		return demandCovered(p, maxClusters)
	})
	t.Logf("%s: %d Ready", since(start), want)

	// A restart: the history is in the API, not in the operator.
	pre := mustPool(t, ns, name).Status.Demand
	op.restart(t)
	t.Logf("%s: operator restarted", since(start))
	after := arrive(1)[0]
	if after.CreatedAt == nil {
		t.Fatalf("lease %s has no created_at", after.ID)
	}
	restarted := waitPool(t, ns, name, 30*time.Second, "the lease after the restart counted", func(p *kobev1.ClusterPool) error {
		d := p.Status.Demand
		if d == nil || d.CountedThrough == nil || d.CountedThrough.Time.Before(after.CreatedAt.Truncate(time.Second)) {
			return errors.New("not counted yet")
		}
		return nil
	})
	post := restarted.Status.Demand
	newBucket := time.Unix(after.CreatedAt.Unix()/5*5, 0)
	kept := 0
	for _, b := range post.Arrivals {
		wantCount := int32(1)
		for _, old := range pre.Arrivals {
			if old.Start.Equal(&b.Start) {
				wantCount = old.Count
				if b.Start.Time.Equal(newBucket) {
					wantCount++
				} else {
					kept++
				}
			}
		}
		if b.Count != wantCount {
			t.Errorf("after the restart the bucket at %s counts %d, want %d: a lease was lost or counted twice (before %+v, after %+v)",
				b.Start.UTC(), b.Count, wantCount, pre.Arrivals, post.Arrivals)
		}
	}
	if kept == 0 {
		t.Fatalf("no bucket from before the restart is left to compare: before %+v, after %+v", pre.Arrivals, post.Arrivals)
	}
	if err := checkWarmTarget(post); err != nil {
		t.Error(err)
	}
	keep := max(min(post.WarmTarget, maxClusters), 1)
	waitPool(t, ns, name, 30*time.Second, fmt.Sprintf("still %d Ready or Creating after the restart", keep), func(p *kobev1.ClusterPool) error {
		if got := p.Status.Ready + p.Status.Creating; got < keep {
			return fmt.Errorf("%d Ready or Creating", got)
		}
		return demandCovered(p, maxClusters)
	})
	t.Logf("%s: after the restart: %s", since(start), brief(restarted))

	// No lease for a whole window: the target falls, the pool shrinks.
	quiet := waitPool(t, ns, name, window+30*time.Second, "the warm target to fall once no lease arrived for a window", func(p *kobev1.ClusterPool) error {
		if d := p.Status.Demand; d == nil || d.WarmTarget != 0 || len(d.Arrivals) != 0 {
			return errors.New("arrivals still in the window")
		}
		return demandCovered(p, maxClusters)
	})
	if quiet.Status.Demand.ProvisionSeconds == 0 {
		t.Errorf("the provisioning time was forgotten with the arrivals: %s", brief(quiet))
	}
	waitPool(t, ns, name, time.Minute, "back to minReady", func(p *kobev1.ClusterPool) error {
		if p.Status.Ready != 1 || p.Status.Creating != 0 || p.Status.Leased != 0 {
			return errors.New("not back to 1 Ready")
		}
		return nil
	})
	t.Logf("%s: quiet: back to 1 Ready", since(start))
}

// waitDemand waits until the pool counted n arrivals and checks its warm
// target against the formula.
func waitDemand(t *testing.T, ns, name string, n int32) *kobev1.ClusterPool {
	t.Helper()
	p := waitPool(t, ns, name, 30*time.Second, fmt.Sprintf("%d arrivals counted", n), func(p *kobev1.ClusterPool) error {
		d := p.Status.Demand
		if d == nil {
			return errors.New("no demand")
		}
		var sum int32
		for _, b := range d.Arrivals {
			sum += b.Count
		}
		if sum != n {
			return fmt.Errorf("%d arrivals counted", sum)
		}
		return nil
	})
	if err := checkWarmTarget(p.Status.Demand); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkWarmTarget: warmTarget = ceil(peak bucket x provisioning seconds /
// bucket seconds), and the peak rate per minute printed to two decimals.
func checkWarmTarget(d *kobev1.DemandStatus) error {
	peak := maxCount(d)
	want := int32(math.Ceil(float64(peak) * float64(d.ProvisionSeconds) / float64(d.BucketSeconds)))
	if d.WarmTarget != want {
		return fmt.Errorf("warmTarget %d, want ceil(%d x %d s / %d s) = %d", d.WarmTarget, peak, d.ProvisionSeconds, d.BucketSeconds, want)
	}
	if rate := fmt.Sprintf("%.2f", float64(peak)*60/float64(d.BucketSeconds)); d.PeakArrivalsPerMinute != rate {
		return fmt.Errorf("peakArrivalsPerMinute %q, want %q", d.PeakArrivalsPerMinute, rate)
	}
	return nil
}

// demandCovered: a Predictive pool covers the measured demand unless
// maxClusters is below it.
func demandCovered(p *kobev1.ClusterPool, maxClusters int32) error {
	if p.Status.Demand != nil && p.Status.Demand.WarmTarget > maxClusters {
		return hasCondition(p, kobev1.ConditionDemandCovered, metav1.ConditionFalse, kobev1.ReasonShallowerThanDemand)
	}
	return hasCondition(p, kobev1.ConditionDemandCovered, metav1.ConditionTrue, kobev1.ReasonDemandCovered)
}

func maxCount(d *kobev1.DemandStatus) int32 {
	var m int32
	for _, b := range d.Arrivals {
		m = max(m, b.Count)
	}
	return m
}
