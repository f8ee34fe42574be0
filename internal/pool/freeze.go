package pool

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Frozen warm members (issue 28, item 3). A Ready member of the local
// backend idles at about 4% of a core and nothing while frozen with the
// cgroup freezer, and answers /readyz within about a second of its thaw
// (docs/benchmarks.md, "Frozen warm members"). PlanFreeze decides which
// of a pool's warm members to keep running and which to freeze or thaw
// (the pool controller writes it as each member's spec.frozen);
// FreezeCandidates is what it decides from.

// DefaultWarmRunning is how many warm members a pool keeps running when it
// freezes the others (issue 28's default for warm.running).
const DefaultWarmRunning = 1

// DefaultFreezeSettle is how long a member stays Ready and running before
// it may be frozen: its checks have passed and its start-up work (the
// controller manager's first sync) is over, so a thaw resumes an idle
// cluster.
const DefaultFreezeSettle = 10 * time.Second

// FreezeCandidate is one member of a pool, in the order the pool hands
// members out (the first is handed out first).
type FreezeCandidate struct {
	// Name is the member's name.
	Name string
	// Ready: the member is Ready and its checks passed; a member that is
	// not (creating, recycling, failed) is never frozen by PlanFreeze and,
	// when frozen, is thawed so that it can be checked or destroyed.
	Ready bool
	// Leased: a lease holds the member. A leased member always runs.
	Leased bool
	// Frozen: the member's processes are frozen now.
	Frozen bool
	// RunningSince is when the member last became Ready or was thawed.
	RunningSince time.Time
}

// FreezeInput is what PlanFreeze decides from.
type FreezeInput struct {
	// Members of the pool, in hand-out order.
	Members []FreezeCandidate
	// Running is how many Ready, unleased members to keep running
	// (warm.running); negative means DefaultWarmRunning.
	Running int
	// Waiting is how many lease requests wait for a member of the pool:
	// that many more are kept running (thawed ahead of their hand-out).
	Waiting int
	// Settle is how long a member runs before it may be frozen; zero
	// means DefaultFreezeSettle.
	Settle time.Duration
	// Now is the time of the decision.
	Now time.Time
}

// FreezePlan is what to do, by member name.
type FreezePlan struct {
	// Freeze are Ready, unleased members beyond those kept running.
	Freeze []string
	// Thaw are frozen members that must run: leased, not Ready, or needed
	// to bring the running count back up. A thawed member's health is
	// checked before it is handed out.
	Thaw []string
	// RequeueAfter is when to decide again because a member becomes old
	// enough to freeze (zero: no such member).
	RequeueAfter time.Duration
}

// PlanFreeze decides which members to freeze and thaw so that, of the
// Ready unleased members, Running+Waiting run (or all of them, when fewer)
// and the rest are frozen. Members that run are kept running rather than
// swapped for frozen ones; those kept are the first in hand-out order,
// those frozen the last (each once it has run for Settle, its
// place not taken by an earlier member meanwhile). Leased and not-Ready members always run. A member
// running for less than Settle is never frozen: RequeueAfter says when it
// may be.
func PlanFreeze(in FreezeInput) FreezePlan {
	running := in.Running
	if running < 0 {
		running = DefaultWarmRunning
	}
	settle := in.Settle
	if settle <= 0 {
		settle = DefaultFreezeSettle
	}
	want := running + max(in.Waiting, 0)

	var plan FreezePlan
	var warmRunning, warmFrozen []FreezeCandidate
	for _, m := range in.Members {
		switch {
		case m.Frozen && (m.Leased || !m.Ready):
			plan.Thaw = append(plan.Thaw, m.Name)
		case m.Leased || !m.Ready:
		case m.Frozen:
			warmFrozen = append(warmFrozen, m)
		default:
			warmRunning = append(warmRunning, m)
		}
	}

	// Too few run: thaw the first frozen ones in hand-out order.
	for _, m := range warmFrozen[:min(max(want-len(warmRunning), 0), len(warmFrozen))] {
		plan.Thaw = append(plan.Thaw, m.Name)
	}
	// Too many run: freeze the last ones, each once it has settled (an
	// earlier one is not frozen in its place: the first in hand-out order
	// are the ones that run).
	if extra := len(warmRunning) - want; extra > 0 {
		for _, m := range warmRunning[len(warmRunning)-extra:] {
			if age := in.Now.Sub(m.RunningSince); age < settle {
				plan.RequeueAfter = minPositive(plan.RequeueAfter, settle-age)
				continue
			}
			plan.Freeze = append(plan.Freeze, m.Name)
		}
	}
	return plan
}

// WarmRunning is the pool's warm.running, -1 when unset (PlanFreeze's
// default).
func WarmRunning(spec *kobev1.ClusterPoolSpec) int {
	if spec.Warm == nil || spec.Warm.Running == nil {
		return -1
	}
	return int(*spec.Warm.Running)
}

// FreezeCandidates are a pool's members as PlanFreeze sees them, in the
// order they run first: members of the pool's current template (hash)
// before older ones, which the pool replaces, then the oldest (lowest
// ordinal) first. Members being deleted are left out: their teardown
// thaws them. Frozen is what the pool asked (spec.frozen): a member asked
// to thaw counts as running while it thaws, so it is not thawed twice.
func FreezeCandidates(members []kobev1.ClusterInstance, hash string) []FreezeCandidate {
	ordered := make([]*kobev1.ClusterInstance, 0, len(members))
	for i := range members {
		if members[i].DeletionTimestamp == nil {
			ordered = append(ordered, &members[i])
		}
	}
	slices.SortStableFunc(ordered, func(a, b *kobev1.ClusterInstance) int {
		aOld, bOld := hash != "" && a.Spec.TemplateHash != hash, hash != "" && b.Spec.TemplateHash != hash
		if aOld != bOld {
			if aOld {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Spec.Ordinal, b.Spec.Ordinal), cmp.Compare(a.Name, b.Name))
	})
	out := make([]FreezeCandidate, 0, len(ordered))
	for _, m := range ordered {
		out = append(out, FreezeCandidate{
			Name:         m.Name,
			Ready:        m.Status.Phase == kobev1.InstanceReady,
			Leased:       m.Spec.LeaseRef != nil,
			Frozen:       m.Spec.Frozen,
			RunningSince: runningSince(m),
		})
	}
	return out
}

// runningSince is when m last became Ready or was asked to thaw (the
// Frozen condition's move to False).
func runningSince(m *kobev1.ClusterInstance) time.Time {
	var t time.Time
	if m.Status.LastPhaseChange != nil {
		t = m.Status.LastPhaseChange.Time
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, kobev1.ConditionFrozen); c != nil && c.Status == metav1.ConditionFalse && c.LastTransitionTime.After(t) {
		t = c.LastTransitionTime.Time
	}
	return t
}
