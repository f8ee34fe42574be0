package pool

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// defaultMaxSurge is how many members beyond the target a rollout builds
// at a time when rollout.maxSurge is unset.
const defaultMaxSurge = 1

// Removal is a member the pool deletes, and why.
type Removal struct {
	// Member is the member as read; the caller deletes it with its UID and
	// resourceVersion as preconditions.
	Member kobev1.ClusterInstance
	// Reason is kobev1.ReasonScaledDown, ReasonOutdated or ReasonIdleExpired.
	Reason string
	// Why says it for humans (events and logs).
	Why string
}

// roster sorts the pool's unbound members by what a rollout does with them.
type roster struct {
	// ready are the unbound Ready members, in the order they are removed:
	// stale first, then those built from an older template (kept under
	// onTemplateChange Ignore), then those failing probes, then the oldest.
	ready []candidate
	// staleReady counts the ready members to replace.
	staleReady int32
	// outdatedCreating are Creating members of an older template, removed
	// at once under Recreate: they hold no warm capacity.
	outdatedCreating []Removal
	// freshCreating counts the Creating members that are not outdated.
	freshCreating int32
	// idleIn is how long until the next Ready member reaches maxIdle; 0 none.
	idleIn time.Duration
}

// candidate is an unbound Ready member; reason is set when it is stale.
type candidate struct {
	m           *kobev1.ClusterInstance
	oldTemplate bool
	reason, why string
}

// outdated is status.outdated: the members the pool replaces.
func (r *roster) outdated() int32 {
	return r.staleReady + int32(len(r.outdatedCreating))
}

// survey builds the roster of the pool's members at now.
func survey(p *kobev1.ClusterPool, members []kobev1.ClusterInstance, hash string, now time.Time) roster {
	recreate := p.Spec.Rollout == nil || p.Spec.Rollout.OnTemplateChange != kobev1.TemplateChangeIgnore
	var r roster
	for i := range members {
		m := &members[i]
		old := m.Spec.TemplateHash != hash
		switch classify(m) {
		case classCreating:
			if old && recreate {
				r.outdatedCreating = append(r.outdatedCreating, Removal{Member: *m, Reason: kobev1.ReasonOutdated,
					Why: fmt.Sprintf("built from template %s, the pool builds %s; still Creating, so no warm capacity is lost", m.Spec.TemplateHash, hash)})
			} else {
				r.freshCreating++
			}
		case classReady:
			c := candidate{m: m, oldTemplate: old}
			idle, known := idleFor(p, m, now)
			switch {
			case old && recreate:
				c.reason, c.why = kobev1.ReasonOutdated, fmt.Sprintf("built from template %s, the pool builds %s", m.Spec.TemplateHash, hash)
			case known && idle >= p.Spec.MaxIdle.Duration:
				c.reason, c.why = kobev1.ReasonIdleExpired, fmt.Sprintf("Ready and unleased for %s, maxIdle is %s", idle.Round(time.Second), p.Spec.MaxIdle.Duration)
			case known:
				r.idleIn = minPositive(r.idleIn, p.Spec.MaxIdle.Duration-idle)
			}
			if c.reason != "" {
				r.staleReady++
			}
			r.ready = append(r.ready, c)
		}
	}
	slices.SortStableFunc(r.ready, func(a, b candidate) int {
		return cmp.Or(
			cmpBool(a.reason != "", b.reason != ""),
			cmpBool(a.oldTemplate, b.oldTemplate),
			cmp.Compare(b.m.Status.HealthFailures, a.m.Status.HealthFailures),
			cmp.Compare(a.m.Spec.Ordinal, b.m.Spec.Ordinal),
		)
	})
	return r
}

// idleFor is how long m has sat Ready; known is false when the pool sets
// no maxIdle (nothing to measure) or m's last phase change is unknown.
func idleFor(p *kobev1.ClusterPool, m *kobev1.ClusterInstance, now time.Time) (idle time.Duration, known bool) {
	if p.Spec.MaxIdle == nil || p.Spec.MaxIdle.Duration <= 0 || m.Status.LastPhaseChange == nil {
		return 0, false
	}
	return now.Sub(m.Status.LastPhaseChange.Time), true
}

// remove returns the first n Ready members of the roster as removals, and
// the outdated Creating ones; a member that is not stale is scaled down.
func (r *roster) remove(n int32, target int32) []Removal {
	out := slices.Clone(r.outdatedCreating)
	for _, c := range r.ready[:min(int(n), len(r.ready))] {
		rm := Removal{Member: *c.m, Reason: c.reason, Why: c.why}
		if rm.Reason == "" {
			rm.Reason, rm.Why = kobev1.ReasonScaledDown, fmt.Sprintf("the pool wants %d Ready or Creating members", target)
		}
		out = append(out, rm)
	}
	return out
}

// changes is what the pool does to its members, and what held it back.
type changes struct {
	// create is how many members to create; wanted is how many the target
	// and the surge asked for before backoff and caps.
	create, wanted int32
	remove         []Removal
	// backoff is how long creates still wait after consecutive failures.
	backoff            time.Duration
	capped, hostCapped bool
	oneAtATime         bool
	// scaleDownIn is how long until surplus Ready members may go, idleIn
	// until a Ready member reaches maxIdle; 0 none.
	scaleDownIn, idleIn time.Duration
}

// maxSurge is rollout.maxSurge or its default.
func maxSurge(spec *kobev1.ClusterPoolSpec) int32 {
	if r := spec.Rollout; r != nil && r.MaxSurge != nil && *r.MaxSurge > 0 {
		return *r.MaxSurge
	}
	return defaultMaxSurge
}

// decideChanges plans creates and removals, surge-style: fresh members are
// built up to the target, at most maxSurge beyond it counting the stale
// ones still serving; stale Ready members are retired only while Ready
// stays at or above the target; Ready members beyond the target are scaled
// down once sizing allows. Without stale members this is plain "create up to
// the target, remove Ready beyond it".
func decideChanges(in *Input, sz sizing, r *roster, c Counters, hash string) changes {
	ch := changes{idleIn: r.idleIn}
	have := c.Ready + r.freshCreating // outdated Creating members go in this plan
	fresh := have - r.staleReady
	ch.wanted = max(0, min(sz.target-fresh, sz.target+maxSurge(&in.Pool.Spec)-have))
	if ch.wanted > 0 {
		if ch.backoff = createBackoff(&in.Pool.Status, hash, in.Now); ch.backoff == 0 {
			ch.create, ch.capped, ch.hostCapped = capCreates(in, ch.wanted, sz.maxClusters)
		}
	}

	retire := min(r.staleReady, max(0, c.Ready-sz.target))
	// No headroom: maxClusters leaves no room to build a replacement first,
	// so retire one stale member and build its replacement in its place.
	// Only while nothing fresh is coming up and nothing is on its way out
	// (it would free a place by itself): one at a time.
	if retire == 0 && r.staleReady > 0 && ch.capped && ch.create == 0 && r.freshCreating == 0 &&
		c.Recycling == 0 && len(r.outdatedCreating) == 0 {
		retire, ch.oneAtATime = 1, true
	}
	// Scale down never counts on members still coming up.
	if surplus := max(0, min(have-sz.target, c.Ready-sz.target)); surplus > retire {
		at := scaleDownAt(in.Pool, sz, in.Now)
		if in.Now.Before(at) {
			ch.scaleDownIn = at.Sub(in.Now)
		} else {
			retire = surplus
		}
	}
	ch.remove = r.remove(retire, sz.target)
	return ch
}

// capCreates holds want to the headroom that maxClusters (members of any
// phase) and the host's cap leave.
func capCreates(in *Input, want int32, maxClusters *int32) (n int32, capped, hostCapped bool) {
	n = want
	if maxClusters != nil {
		if headroom := max(0, *maxClusters-int32(len(in.Members))); n > headroom {
			n, capped = headroom, true
		}
	}
	if headroom, ok := in.Host.headroom(); ok && n > headroom {
		n, hostCapped = headroom, true
	}
	return n, capped, hostCapped
}
