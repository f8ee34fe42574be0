package pool

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// DefaultScaleDownAfter is how long a pool that follows demand must see no
// pressure before it removes Ready members beyond its target.
const DefaultScaleDownAfter = 5 * time.Minute

// defaultSize is the CRD's default spec.size.
const defaultSize = 3

// sizing is what a pool wants now: the warm target W, the target T of Ready
// plus Creating members, and whether demand presses on it.
type sizing struct {
	// follows is whether the pool follows demand (Reactive or Predictive):
	// it grows under pressure and shrinks only scaleDownAfter after it.
	follows bool
	warm    int32
	target  int32
	// pressure: a lease waits, or Ready is down to scaleUpThreshold.
	pressure bool
	// maxClusters caps members of any phase; nil is no cap.
	maxClusters *int32
}

// scalingMode is the pool's mode; "" for a pool without scaling.
func scalingMode(spec *kobev1.ClusterPoolSpec) kobev1.ScalingMode {
	switch {
	case spec.Scaling == nil:
		return ""
	case spec.Scaling.Mode == "":
		return kobev1.ScalingReactive
	}
	return spec.Scaling.Mode
}

// fixedSize is the warm target of a pool without scaling.
func fixedSize(spec *kobev1.ClusterPoolSpec) int32 {
	if spec.Size != nil {
		return *spec.Size
	}
	return defaultSize
}

// warmFor is W: size without scaling; minReady for Fixed and Reactive;
// the measured demand's warm target bounded by minReady and maxClusters for
// Predictive.
func warmFor(p *kobev1.ClusterPool) int32 {
	s := p.Spec.Scaling
	if s == nil {
		return fixedSize(&p.Spec)
	}
	var minReady int32
	if s.MinReady != nil {
		minReady = *s.MinReady
	}
	if scalingMode(&p.Spec) != kobev1.ScalingPredictive || p.Status.Demand == nil {
		return minReady
	}
	w := max(p.Status.Demand.WarmTarget, minReady)
	if s.MaxClusters != nil {
		w = min(w, *s.MaxClusters)
	}
	return w
}

// WarmTarget is the number of Ready members the pool keeps at rest (its
// warm target W), as the planner computes it; the HTTP API advertises it.
func WarmTarget(p *kobev1.ClusterPool) int32 { return warmFor(p) }

// FollowsDemand is whether the pool grows under pressure and shrinks only
// ScaleDownAfter after it (scaling.mode Reactive or Predictive).
func FollowsDemand(spec *kobev1.ClusterPoolSpec) bool {
	m := scalingMode(spec)
	return m == kobev1.ScalingReactive || m == kobev1.ScalingPredictive
}

// ScaleDownAfter is how long a pool that follows demand waits after the
// last pressure before it shrinks: scaling.scaleDownAfter, else
// DefaultScaleDownAfter.
func ScaleDownAfter(spec *kobev1.ClusterPoolSpec) time.Duration {
	if s := spec.Scaling; s != nil && s.ScaleDownAfter != nil {
		return s.ScaleDownAfter.Duration
	}
	return DefaultScaleDownAfter
}

// sizeFor works out the pool's sizing from its Ready and Leased counts and
// its queue. Under threshold pressure the pool builds as many members again
// as leases took from the warm target (the "start creating more" of spec
// 000): the leases that drained it are likely to come again while it refills.
func sizeFor(p *kobev1.ClusterPool, c Counters, queue int32) sizing {
	sz := sizing{warm: warmFor(p), follows: FollowsDemand(&p.Spec)}
	sz.target = sz.warm
	if p.Spec.Scaling != nil {
		sz.maxClusters = p.Spec.Scaling.MaxClusters
	}
	if !sz.follows {
		return sz
	}
	th := p.Spec.Scaling.ScaleUpThreshold
	atThreshold := th != nil && c.Ready <= *th && c.Ready < sz.warm && c.Leased > 0
	sz.pressure = queue > 0 || atThreshold
	sz.target += queue
	if atThreshold {
		sz.target += sz.warm - c.Ready
	}
	return sz
}

// scaleDownAt is when Ready members beyond the target may go: at once for a
// pool that does not follow demand, else scaleDownAfter after the last
// pressure (now while it holds; a pool that never saw any may at once).
func scaleDownAt(p *kobev1.ClusterPool, sz sizing, now time.Time) time.Time {
	if !sz.follows {
		return time.Time{}
	}
	last := now
	if !sz.pressure {
		if p.Status.LastPressure == nil {
			return time.Time{}
		}
		last = p.Status.LastPressure.Time
	}
	return last.Add(ScaleDownAfter(&p.Spec))
}

// demandCoveredCondition says whether the warm target covers the measured demand;
// nil for a pool without scaling or without a measurement.
func demandCoveredCondition(p *kobev1.ClusterPool, warm int32) *metav1.Condition {
	d := p.Status.Demand
	if p.Spec.Scaling == nil || d == nil {
		return nil
	}
	c := &metav1.Condition{Type: kobev1.ConditionDemandCovered, Status: metav1.ConditionTrue, Reason: kobev1.ReasonDemandCovered}
	switch {
	case d.WarmTarget == 0:
		c.Message = fmt.Sprintf("no lease arrivals over the last %s ask for warm members; the pool keeps %d", d.Window.Duration, warm)
	case warm >= d.WarmTarget:
		c.Message = fmt.Sprintf("the pool keeps %d warm; the measured peak of %s leases/min over %s and %ds to provision ask for %d",
			warm, d.PeakArrivalsPerMinute, d.Window.Duration, d.ProvisionSeconds, d.WarmTarget)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, kobev1.ReasonShallowerThanDemand
		fix := "set scaling.mode Predictive or raise minReady"
		if scalingMode(&p.Spec) == kobev1.ScalingPredictive {
			fix = "raise scaling.maxClusters" // Predictive already aims for it: only the cap holds it back
		}
		c.Message = fmt.Sprintf("the pool keeps %d warm; the measured peak of %s leases/min over %s and %ds to provision ask for %d; %s",
			warm, d.PeakArrivalsPerMinute, d.Window.Duration, d.ProvisionSeconds, d.WarmTarget, fix)
	}
	return c
}
