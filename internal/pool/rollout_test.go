package pool

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// newTemplate changes what members are built from: members built by member
// (from testPool's template) are outdated in such a pool.
func newTemplate(p *kobev1.ClusterPool) { p.Spec.Cluster.Version = "v1.38.0" }

func surge(n int32) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) {
		if p.Spec.Rollout == nil {
			p.Spec.Rollout = &kobev1.RolloutSpec{}
		}
		p.Spec.Rollout.MaxSurge = ptr.To(n)
	}
}
func ignoreTemplate(p *kobev1.ClusterPool) {
	p.Spec.Rollout = &kobev1.RolloutSpec{OnTemplateChange: kobev1.TemplateChangeIgnore}
}
func maxIdle(d time.Duration) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) { p.Spec.MaxIdle = &metav1.Duration{Duration: d} }
}
func readyFor(d time.Duration) func(*kobev1.ClusterInstance) {
	return func(m *kobev1.ClusterInstance) { m.Status.LastPhaseChange = ptr.To(metav1.NewTime(now.Add(-d))) }
}

func TestDecideRollout(t *testing.T) {
	current := builtFrom(testPool(newTemplate))
	cases := []struct {
		name     string
		in       Input
		want     want
		outdated int32
	}{{
		name:     "a changed template: build a new member first (maxSurge 1), retire nothing yet",
		in:       Input{Pool: testPool(newTemplate), Members: readyMembers(0, 1)},
		want:     want{create: []int32{2}, next: 3, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy},
		outdated: 2,
	}, {
		name:     "maxSurge 2 builds two at a time",
		in:       Input{Pool: testPool(newTemplate, surge(2)), Members: readyMembers(0, 1)},
		want:     want{create: []int32{2, 3}, next: 4, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy},
		outdated: 2,
	}, {
		name: "while the new member builds, nothing more happens",
		in: Input{Pool: testPool(newTemplate), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady), member(1, kobev1.InstanceReady), member(2, kobev1.InstanceCreating, current)}},
		want:     want{next: 3, counters: Counters{Ready: 2, Creating: 1}, phase: kobev1.PoolHealthy},
		outdated: 2,
	}, {
		name: "a new member Ready: retire one outdated member (Ready stays at the target) and build the next",
		in: Input{Pool: testPool(newTemplate), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady), member(1, kobev1.InstanceReady, failures(1)), member(2, kobev1.InstanceReady, current)}},
		want:     want{delete: []string{"pool-ci-1:Outdated"}, next: 3, counters: Counters{Ready: 3, Unhealthy: 1}, phase: kobev1.PoolHealthy},
		outdated: 2,
	}, {
		name: "outdated members still Creating are removed at once and replaced",
		in: Input{Pool: testPool(newTemplate), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating), member(1, "")}},
		want:     want{create: []int32{2, 3}, delete: []string{"pool-ci-0:Outdated", "pool-ci-1:Outdated"}, next: 4, counters: Counters{Creating: 2}, phase: kobev1.PoolFilling},
		outdated: 2,
	}, {
		name: "leased members are never touched nor counted outdated",
		in: Input{Pool: testPool(newTemplate), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceLeased, bound), member(1, kobev1.InstanceReady, bound), member(2, kobev1.InstanceReady, current), member(3, kobev1.InstanceReady, current)}},
		want: want{next: 4, counters: Counters{Ready: 2, Leased: 2}, phase: kobev1.PoolHealthy},
	}, {
		name:     "onTemplateChange Ignore keeps outdated members",
		in:       Input{Pool: testPool(newTemplate, ignoreTemplate), Members: append(readyMembers(0, 1), member(2, kobev1.InstanceCreating))},
		want:     want{next: 3, counters: Counters{Ready: 2, Creating: 1}, phase: kobev1.PoolHealthy},
		outdated: 0,
	}, {
		name: "onTemplateChange Ignore: scale down still takes outdated members first",
		in: Input{Pool: testPool(newTemplate, ignoreTemplate, size(1)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady, current), member(1, kobev1.InstanceReady)}},
		want: want{delete: []string{"pool-ci-1:ScaledDown"}, next: 2, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy},
	}, {
		name: "maxIdle: a member Ready too long is replaced surge-style; the next expiry is when the pool looks again",
		in: Input{Pool: testPool(maxIdle(time.Hour)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady, readyFor(2*time.Hour)), member(1, kobev1.InstanceReady, readyFor(20*time.Minute))}},
		want:     want{create: []int32{2}, next: 3, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy, requeue: 40 * time.Minute},
		outdated: 1,
	}, {
		name: "maxIdle: once the replacement is Ready the idle member goes, as IdleExpired",
		in: Input{Pool: testPool(maxIdle(time.Hour)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady, readyFor(2*time.Hour)), member(1, kobev1.InstanceReady, readyFor(20*time.Minute)),
			member(2, kobev1.InstanceReady, readyFor(time.Minute))}},
		want:     want{delete: []string{"pool-ci-0:IdleExpired"}, next: 3, counters: Counters{Ready: 3}, phase: kobev1.PoolHealthy, requeue: 40 * time.Minute},
		outdated: 1,
	}, {
		name: "maxIdle: leased members are not idle",
		in: Input{Pool: testPool(maxIdle(time.Hour)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceLeased, bound, readyFor(2*time.Hour)), member(1, kobev1.InstanceReady, readyFor(59*time.Minute)),
			member(2, kobev1.InstanceReady, readyFor(time.Hour-time.Second))}},
		want: want{next: 3, counters: Counters{Ready: 2, Leased: 1}, phase: kobev1.PoolHealthy, requeue: time.Second},
	}, {
		name: "no headroom: maxClusters forbids a new member first, so one outdated member is retired",
		in:   Input{Pool: testPool(newTemplate, scaling(2, 2)), Members: readyMembers(0, 1)},
		want: want{delete: []string{"pool-ci-0:Outdated"}, next: 2, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy,
			conds:       map[string]string{"Capacity": "False/MaxClustersReached"},
			msgContains: map[string]string{"Capacity": "wanted 1 members more, scaling.maxClusters 2 allows 0; outdated members are replaced one at a time"}},
		outdated: 2,
	}, {
		name: "no headroom: while the retired member is on its way out, no other goes",
		in: Input{Pool: testPool(newTemplate, scaling(2, 2)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady, deleting), member(1, kobev1.InstanceReady)}},
		want: want{next: 2, counters: Counters{Ready: 1, Recycling: 1}, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "False/MaxClustersReached"}},
		outdated: 1,
	}, {
		name: "no headroom: while its replacement builds, no other goes",
		in: Input{Pool: testPool(newTemplate, scaling(2, 2)), Members: []kobev1.ClusterInstance{
			member(1, kobev1.InstanceReady), member(2, kobev1.InstanceCreating, current)}},
		want:     want{next: 3, counters: Counters{Ready: 1, Creating: 1}, phase: kobev1.PoolFilling},
		outdated: 1,
	}, {
		name: "surge counts against maxClusters: one place left, one new member",
		in:   Input{Pool: testPool(newTemplate, scaling(2, 3), surge(2)), Members: readyMembers(0, 1)},
		want: want{create: []int32{2}, next: 3, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy,
			conds: map[string]string{"Capacity": "False/MaxClustersReached"}},
		outdated: 2,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.in)
			checkPlan(t, got, tc.want)
			if got.Outdated != tc.outdated {
				t.Errorf("Outdated = %d, want %d", got.Outdated, tc.outdated)
			}
		})
	}
}

// world is a pool's members as a simulated rollout moves them: each step
// the planner decides, then members it created become Ready one step later
// and members it deleted are gone one step later.
type world struct {
	p       *kobev1.ClusterPool
	members []kobev1.ClusterInstance
	uid     int
}

// step runs Decide, applies the plan and returns it.
func (w *world) step() Plan {
	plan := decide(Input{Pool: w.p, Members: w.members})
	w.p.Status.NextOrdinal = plan.NextOrdinal
	// What the previous step started finishes first.
	kept := w.members[:0]
	for _, m := range w.members {
		switch {
		case m.DeletionTimestamp != nil:
			continue
		case m.Status.Phase == kobev1.InstanceCreating:
			m.Status.Phase = kobev1.InstanceReady
		}
		kept = append(kept, m)
	}
	w.members = kept
	for _, rm := range plan.Delete {
		for i := range w.members {
			if w.members[i].Name == rm.Member.Name {
				w.members[i].DeletionTimestamp = ptr.To(metav1.NewTime(now))
			}
		}
	}
	for _, n := range plan.Create {
		m := NewMember(w.p, n, TemplateHash(&w.p.Spec))
		w.uid++
		m.UID = types.UID(fmt.Sprintf("sim-%d", w.uid))
		m.Status.Phase = kobev1.InstanceCreating
		w.members = append(w.members, *m)
	}
	return plan
}

// ready counts the Ready members not being deleted, and the outdated among them.
func (w *world) ready() (ready, outdated int32) {
	hash := TemplateHash(&w.p.Spec)
	for _, m := range w.members {
		if m.DeletionTimestamp == nil && m.Status.Phase == kobev1.InstanceReady {
			ready++
			if m.Spec.TemplateHash != hash {
				outdated++
			}
		}
	}
	return ready, outdated
}

// TestRolloutSimulation runs whole rollouts of a pool of 2 through the
// planner: with headroom Ready never drops below 2 and at most maxSurge
// members build beyond it; without headroom Ready dips by one at most and
// the pool never passes maxClusters. Every rollout finishes with two
// members of the new template and nothing else.
func TestRolloutSimulation(t *testing.T) {
	cases := []struct {
		name       string
		pool       *kobev1.ClusterPool
		minReady   int32 // lowest Ready allowed at any step
		maxMembers int   // most members (any phase) at any step
		wantSteps  int   // steps until the pool is at rest, at most
	}{
		{name: "size 2, maxSurge 1", pool: testPool(newTemplate), minReady: 2, maxMembers: 3, wantSteps: 8},
		{name: "size 2, maxSurge 2", pool: testPool(newTemplate, surge(2)), minReady: 2, maxMembers: 4, wantSteps: 6},
		{name: "scaling 2..3, maxSurge 2 (the cap allows one extra)", pool: testPool(newTemplate, scaling(2, 3), surge(2)), minReady: 2, maxMembers: 3, wantSteps: 8},
		{name: "scaling 2..2: no headroom, one at a time", pool: testPool(newTemplate, scaling(2, 2)), minReady: 1, maxMembers: 2, wantSteps: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &world{p: tc.pool, members: readyMembers(0, 1)}
			w.p.Status.NextOrdinal = 2
			var trace []string
			for i := 0; ; i++ {
				if i > tc.wantSteps {
					t.Fatalf("not at rest after %d steps:\n%s", tc.wantSteps, strings.Join(trace, "\n"))
				}
				plan := w.step()
				ready, outdated := w.ready()
				trace = append(trace, fmt.Sprintf("step %d: create %v delete %v -> ready %d (outdated %d), members %d", i, plan.Create, deleted(plan), ready, outdated, len(w.members)))
				if ready < tc.minReady {
					t.Fatalf("Ready %d below %d:\n%s", ready, tc.minReady, strings.Join(trace, "\n"))
				}
				if len(w.members) > tc.maxMembers {
					t.Fatalf("%d members, more than %d:\n%s", len(w.members), tc.maxMembers, strings.Join(trace, "\n"))
				}
				if len(plan.Create) == 0 && len(plan.Delete) == 0 && len(w.members) == 2 && ready == 2 && outdated == 0 {
					t.Logf("at rest after %d steps:\n%s", i, strings.Join(trace, "\n"))
					return
				}
			}
		})
	}
}
