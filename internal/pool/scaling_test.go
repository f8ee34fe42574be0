package pool

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func mode(m kobev1.ScalingMode) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) { p.Spec.Scaling.Mode = m }
}
func threshold(n int32) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) { p.Spec.Scaling.ScaleUpThreshold = ptr.To(n) }
}
func scaleDownAfter(d time.Duration) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) { p.Spec.Scaling.ScaleDownAfter = &metav1.Duration{Duration: d} }
}
func lastPressure(ago time.Duration) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) { p.Status.LastPressure = ptr.To(metav1.NewTime(now.Add(-ago))) }
}

// measured sets the demand measurement's warm target (a peak of 1.50
// leases/min over 1h and 120s to provision ask for 3).
func measured(warmTarget int32) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) {
		p.Status.Demand = &kobev1.DemandStatus{Window: metav1.Duration{Duration: time.Hour}, BucketSeconds: 300,
			PeakArrivalsPerMinute: "1.50", ProvisionSeconds: 120, WarmTarget: warmTarget}
	}
}

func readyMembers(ordinals ...int32) []kobev1.ClusterInstance {
	out := make([]kobev1.ClusterInstance, 0, len(ordinals))
	for _, n := range ordinals {
		out = append(out, member(n, kobev1.InstanceReady))
	}
	return out
}

func TestDecideScaling(t *testing.T) {
	leased := func(n int32) kobev1.ClusterInstance { return member(n, kobev1.InstanceLeased, bound) }
	cases := []struct {
		name     string
		in       Input
		want     want
		pressure bool
		target   int32
	}{{
		name:   "no scaling: the pool holds size, whatever the queue",
		in:     Input{Pool: testPool(size(3)), QueueDepth: 4, Members: readyMembers(0)},
		want:   want{create: []int32{1, 2}, next: 3, counters: Counters{Ready: 1}, phase: kobev1.PoolFilling},
		target: 3,
	}, {
		name: "mode Fixed: minReady warm, the queue does not grow it, and surplus goes at once",
		in: Input{Pool: testPool(scaling(2, 10), mode(kobev1.ScalingFixed), lastPressure(time.Second)), QueueDepth: 3,
			Members: readyMembers(0, 1, 2)},
		want:   want{delete: []string{"pool-ci-0:ScaledDown"}, next: 3, counters: Counters{Ready: 3}, phase: kobev1.PoolHealthy},
		target: 2,
	}, {
		name:     "Reactive (the default mode): a queued lease grows the target by one each",
		in:       Input{Pool: testPool(scaling(1, 10)), QueueDepth: 2, Members: readyMembers(0)},
		want:     want{create: []int32{1, 2}, next: 3, counters: Counters{Ready: 1}, phase: kobev1.PoolHealthy},
		pressure: true, target: 3,
	}, {
		name: "Ready down to scaleUpThreshold while members are leased: build as many again as leases took",
		in: Input{Pool: testPool(scaling(3, 10), threshold(1)),
			Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady), leased(1), leased(2)}},
		// T = 3 + (3 - 1): refill the two and build two more.
		want: want{create: []int32{3, 4, 5, 6}, next: 7, counters: Counters{Ready: 1, Leased: 2}, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "True/CapacityAvailable"}},
		pressure: true, target: 5,
	}, {
		name: "Ready above scaleUpThreshold: refill only, no pressure",
		in: Input{Pool: testPool(scaling(3, 10), threshold(1)),
			Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady), member(1, kobev1.InstanceReady), leased(2)}},
		want:   want{create: []int32{3}, next: 4, counters: Counters{Ready: 2, Leased: 1}, phase: kobev1.PoolFilling},
		target: 3,
	}, {
		name:   "an empty pool filling up is at the threshold with no lease: no pressure",
		in:     Input{Pool: testPool(scaling(3, 10), threshold(0))},
		want:   want{create: []int32{0, 1, 2}, next: 3, phase: kobev1.PoolFilling},
		target: 3,
	}, {
		name: "scale down waits scaleDownAfter after the last pressure: one second before",
		in: Input{Pool: testPool(scaling(1, 10), scaleDownAfter(5*time.Minute), lastPressure(5*time.Minute-time.Second)),
			Members: readyMembers(0, 1, 2)},
		want:   want{next: 3, counters: Counters{Ready: 3}, phase: kobev1.PoolHealthy, requeue: time.Second},
		target: 1,
	}, {
		name: "scale down waits scaleDownAfter after the last pressure: at the boundary the surplus goes, oldest first",
		in: Input{Pool: testPool(scaling(1, 10), scaleDownAfter(5*time.Minute), lastPressure(5*time.Minute)),
			Members: readyMembers(0, 1, 2)},
		want:   want{next: 3, delete: []string{"pool-ci-0:ScaledDown", "pool-ci-1:ScaledDown"}, counters: Counters{Ready: 3}, phase: kobev1.PoolHealthy},
		target: 1,
	}, {
		name:   "scaleDownAfter unset is 5m",
		in:     Input{Pool: testPool(scaling(1, 10), lastPressure(4*time.Minute)), Members: readyMembers(0, 1)},
		want:   want{next: 2, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy, requeue: time.Minute},
		target: 1,
	}, {
		name:   "a pool that never saw pressure shrinks at once",
		in:     Input{Pool: testPool(scaling(1, 10)), Members: readyMembers(0, 1)},
		want:   want{next: 2, delete: []string{"pool-ci-0:ScaledDown"}, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy},
		target: 1,
	}, {
		name:   "scaleDownAfter 0s shrinks at once",
		in:     Input{Pool: testPool(scaling(1, 10), scaleDownAfter(0), lastPressure(0)), Members: readyMembers(0, 1)},
		want:   want{next: 2, delete: []string{"pool-ci-0:ScaledDown"}, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy},
		target: 1,
	}, {
		name: "under pressure now, surplus beyond the target waits a full scaleDownAfter",
		in: Input{Pool: testPool(scaling(1, 10), lastPressure(time.Hour)), QueueDepth: 1,
			Members: readyMembers(0, 1, 2)},
		want:     want{next: 3, counters: Counters{Ready: 3}, phase: kobev1.PoolHealthy, requeue: DefaultScaleDownAfter},
		pressure: true, target: 2,
	}, {
		name: "scale down never takes Creating or leased members",
		in: Input{Pool: testPool(scaling(0, 10)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating), leased(1), member(2, kobev1.InstanceReady)}},
		want:   want{next: 3, delete: []string{"pool-ci-2:ScaledDown"}, counters: Counters{Ready: 1, Creating: 1, Leased: 1}, phase: kobev1.PoolHealthy},
		target: 0,
	}, {
		name: "cap reached: the pool creates what maxClusters leaves and says MaxClustersReached",
		in:   Input{Pool: testPool(scaling(1, 3)), QueueDepth: 5, Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceCreating), leased(1)}},
		want: want{create: []int32{2}, next: 3, counters: Counters{Creating: 1, Leased: 1}, phase: kobev1.PoolFilling,
			conds:       map[string]string{"Capacity": "False/MaxClustersReached", "Ready": "False/Filling"},
			msgContains: map[string]string{"Capacity": "wanted 5 members more, scaling.maxClusters 3 allows 1"}},
		pressure: true, target: 6,
	}, {
		name:   "minReady 0 at rest: nothing warm, nothing built, Healthy",
		in:     Input{Pool: testPool(scaling(0, 5))},
		want:   want{phase: kobev1.PoolHealthy, conds: map[string]string{"Warm": "True/Warm"}},
		target: 0,
	}, {
		name:     "minReady 0 provisions on demand: a queued lease makes the target one",
		in:       Input{Pool: testPool(scaling(0, 5)), QueueDepth: 1},
		want:     want{create: []int32{0}, next: 1, phase: kobev1.PoolHealthy},
		pressure: true, target: 1,
	}, {
		name:   "Predictive aims for the measured warm target",
		in:     Input{Pool: testPool(scaling(1, 10), mode(kobev1.ScalingPredictive), measured(3))},
		want:   want{create: []int32{0, 1, 2}, next: 3, phase: kobev1.PoolFilling, conds: map[string]string{"DemandCovered": "True/DemandCovered"}},
		target: 3,
	}, {
		name:   "Predictive never goes below minReady",
		in:     Input{Pool: testPool(scaling(2, 10), mode(kobev1.ScalingPredictive), measured(0))},
		want:   want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolFilling, conds: map[string]string{"DemandCovered": "True/DemandCovered"}},
		target: 2,
	}, {
		name: "Predictive never goes past maxClusters, and says the cap keeps it shallow",
		in:   Input{Pool: testPool(scaling(1, 4), mode(kobev1.ScalingPredictive), measured(9))},
		want: want{create: []int32{0, 1, 2, 3}, next: 4, phase: kobev1.PoolFilling,
			conds:       map[string]string{"DemandCovered": "False/ShallowerThanDemand"},
			msgContains: map[string]string{"DemandCovered": "the pool keeps 4 warm; the measured peak of 1.50 leases/min over 1h0m0s and 120s to provision ask for 9; raise scaling.maxClusters"}},
		target: 4,
	}, {
		name: "Predictive follows a lower arrival rate down (after scaleDownAfter)",
		in: Input{Pool: testPool(scaling(1, 10), mode(kobev1.ScalingPredictive), measured(1), lastPressure(time.Hour)),
			Members: readyMembers(0, 1, 2)},
		want:   want{next: 3, delete: []string{"pool-ci-0:ScaledDown", "pool-ci-1:ScaledDown"}, counters: Counters{Ready: 3}, phase: kobev1.PoolHealthy},
		target: 1,
	}, {
		name: "Reactive below the measured demand: DemandCovered False, naming the fix",
		in:   Input{Pool: testPool(scaling(1, 10), measured(3)), Members: readyMembers(0)},
		want: want{next: 1, counters: Counters{Ready: 1}, phase: kobev1.PoolHealthy,
			conds:       map[string]string{"DemandCovered": "False/ShallowerThanDemand", "Ready": "True/Warm"},
			msgContains: map[string]string{"DemandCovered": "the pool keeps 1 warm; the measured peak of 1.50 leases/min over 1h0m0s and 120s to provision ask for 3; set scaling.mode Predictive or raise minReady"}},
		target: 1,
	}, {
		name: "Reactive at the measured demand: DemandCovered True",
		in:   Input{Pool: testPool(scaling(3, 10), measured(3)), Members: readyMembers(0, 1, 2)},
		want: want{next: 3, counters: Counters{Ready: 3}, phase: kobev1.PoolHealthy,
			conds: map[string]string{"DemandCovered": "True/DemandCovered"}},
		target: 3,
	}, {
		name: "no arrivals measured: DemandCovered True",
		in:   Input{Pool: testPool(scaling(0, 10), measured(0))},
		want: want{phase: kobev1.PoolHealthy, conds: map[string]string{"DemandCovered": "True/DemandCovered"},
			msgContains: map[string]string{"DemandCovered": "no lease arrivals over the last 1h0m0s"}},
		target: 0,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.in)
			checkPlan(t, got, tc.want)
			if got.Pressure != tc.pressure {
				t.Errorf("Pressure = %v, want %v", got.Pressure, tc.pressure)
			}
			if got.Target != tc.target {
				t.Errorf("Target = %d, want %d", got.Target, tc.target)
			}
		})
	}
}

// TestDemandCoveredOnlyForScalingPools: a pool without scaling, or not
// measured yet, reports no DemandCovered (the controller removes it).
func TestDemandCoveredOnlyForScalingPools(t *testing.T) {
	for name, p := range map[string]*kobev1.ClusterPool{
		"no scaling":   testPool(measured(5)),
		"not measured": testPool(scaling(1, 3)),
	} {
		if c := meta.FindStatusCondition(decide(Input{Pool: p}).Conditions, kobev1.ConditionDemandCovered); c != nil {
			t.Errorf("%s: DemandCovered = %+v, want none", name, c)
		}
	}
}
