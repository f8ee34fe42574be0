package pool

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// DefaultSignalGrace is how long a member may sit Provisioned without passing
// a readiness gate before the pool says the gate's signal is absent.
const DefaultSignalGrace = 30 * time.Second

// Input is everything a pool decision depends on.
type Input struct {
	Pool *kobev1.ClusterPool
	// Members are the pool's ClusterInstances in any phase, including those
	// being deleted and those bound to a lease.
	Members []kobev1.ClusterInstance
	// QueueDepth counts the pool's leases waiting for a member.
	QueueDepth int32
	// Wired lists the backend types this operator can build members with.
	Wired []kobev1.BackendType
	// Backend describes the wired backend of the pool's type, if any.
	Backend Capabilities
	Now     time.Time
	// SignalGrace overrides DefaultSignalGrace when positive.
	SignalGrace time.Duration
	// Host is the per-host cap on members of the pool's backend type; its
	// zero value is no cap.
	Host HostBudget
}

// HostBudget is a cap on the members of one backend type that this host
// holds across every pool and namespace (the local backend's members are
// processes on the operator's machine, --local-max-members).
type HostBudget struct {
	// Max is the most members the host may hold; 0 means no cap.
	Max int32
	// Count is how many members of the type exist now: any phase, any pool,
	// being deleted included (their processes run until they are gone).
	// The pool's own members are among them.
	Count int32
	// Setting names where Max comes from, for the Capacity message (a flag).
	Setting string
}

// headroom is how many members more the host takes; ok is false when there
// is no cap.
func (h HostBudget) headroom() (n int32, ok bool) {
	if h.Max <= 0 {
		return 0, false
	}
	return max(0, h.Max-h.Count), true
}

// Capabilities is what the planner must know of a backend to tell which pool
// fields it does not act on. The pool controller fills it in from the wired
// backend's own answer (backend.Backend.Capabilities).
type Capabilities struct {
	// KubernetesVersions are the versions the backend builds (without a
	// leading "v"); empty when any cluster.version is honoured.
	KubernetesVersions []string
	// Scheduling is whether backend.local.scheduling is supported.
	Scheduling bool
	// MaxServers is the largest cluster.servers the backend builds; 0 means no limit.
	MaxServers int32
}

// Counters are the pool's exact member counts.
type Counters struct {
	Ready, Leased, Creating, Recycling, Unhealthy, Quarantined int32
}

// Plan is what the pool controller must do and report.
type Plan struct {
	// Target is the number of Ready plus Creating members wanted.
	Target int32
	// Create lists the ordinals of the members to create, in order.
	Create []int32
	// Delete lists the Ready, unbound members to remove (scale-down). The
	// caller deletes each with its UID and resourceVersion as preconditions.
	Delete []kobev1.ClusterInstance
	// NextOrdinal is the ordinal after every one used so far, including Create.
	NextOrdinal int32
	Counters    Counters
	Phase       kobev1.PoolPhase
	// Conditions are Warm, Capacity, FieldNotImplemented and Ready, without
	// observedGeneration and transition times.
	Conditions []metav1.Condition
	// RequeueAfter is when a decision changes with time alone; zero if never.
	RequeueAfter time.Duration
}

// class is how a member counts in a pool.
type class int

const (
	classCreating class = iota
	classReady
	classLeased
	classRecycling
	classQuarantined
)

// Classify says how a member counts: a member being deleted is recycling, a
// member bound to a lease is leased whatever its phase says yet, and a member
// without a phase has just been created.
func classify(m *kobev1.ClusterInstance) class {
	switch {
	case m.Status.Phase == kobev1.InstanceQuarantined:
		return classQuarantined
	case !m.DeletionTimestamp.IsZero() || m.Status.Phase == kobev1.InstanceRecycling:
		return classRecycling
	case m.Spec.LeaseRef != nil || m.Status.Phase == kobev1.InstanceLeased:
		return classLeased
	case m.Status.Phase == kobev1.InstanceReady:
		return classReady
	default:
		return classCreating
	}
}

// Decide plans a pool. It never plans members for a pool being deleted or
// whose backend is not wired.
func Decide(in Input) Plan {
	p := in.Pool
	plan := Plan{Counters: count(in.Members), NextOrdinal: nextOrdinal(p, in.Members)}
	c := plan.Counters
	wired := slices.Contains(in.Wired, p.Spec.Backend.Type)
	deleting := !p.DeletionTimestamp.IsZero()

	warm, target, maxClusters := targets(&p.Spec, in.QueueDepth)
	plan.Target = target
	capped, hostCapped := false, false
	if !deleting && wired {
		have := c.Ready + c.Creating
		if want := target - have; want > 0 {
			if maxClusters != nil {
				headroom := max(0, *maxClusters-int32(len(in.Members)))
				if want > headroom {
					want, capped = headroom, true
				}
			}
			if headroom, ok := in.Host.headroom(); ok && want > headroom {
				want, hostCapped = headroom, true
			}
			for range want {
				plan.Create = append(plan.Create, plan.NextOrdinal)
				plan.NextOrdinal++
			}
		}
		// Never delete Creating or bound members; delete Ready ones only
		// beyond the target, so members still coming up are not relied on.
		if surplus := min(have-target, c.Ready-target); surplus > 0 {
			plan.Delete = surplusMembers(in.Members, p, int(surplus))
		}
	}

	absent, requeue := absentSignals(p, in.Members, in.Now, cmp.Or(in.SignalGrace, DefaultSignalGrace))
	plan.RequeueAfter = requeue
	failing := backendFailing(in.Members)

	warmCond := metav1.Condition{Type: kobev1.ConditionWarm}
	switch {
	case c.Ready >= warm:
		warmCond.Status, warmCond.Reason = metav1.ConditionTrue, kobev1.ReasonWarm
		warmCond.Message = fmt.Sprintf("%d of %d warm members are Ready", c.Ready, warm)
	case len(absent) > 0:
		warmCond.Status, warmCond.Reason = metav1.ConditionFalse, kobev1.ReasonReadinessSignalAbsent
		warmCond.Message = absentMessage(absent, cmp.Or(in.SignalGrace, DefaultSignalGrace))
	default:
		warmCond.Status, warmCond.Reason = metav1.ConditionFalse, kobev1.ReasonFilling
		warmCond.Message = fmt.Sprintf("%d of %d warm members are Ready, %d Creating", c.Ready, warm, c.Creating)
	}

	capCond := metav1.Condition{Type: kobev1.ConditionCapacity, Status: metav1.ConditionFalse}
	switch {
	case !wired:
		capCond.Reason = kobev1.ReasonBackendUnavailable
		capCond.Message = fmt.Sprintf("backend %q is not wired in this operator; wired backends: %s", p.Spec.Backend.Type, joinTypes(in.Wired))
		if p.Spec.Backend.Type == kobev1.BackendSim {
			// Never a default: simulated members' kubeconfigs point at nothing.
			capCond.Message += "; start the operator with --enable-sim-backend to serve simulated members (benchmarks and demos only)"
		}
	case failing != "":
		capCond.Reason, capCond.Message = kobev1.ReasonBackendFailing, failing
	case hostCapped:
		capCond.Reason = kobev1.ReasonHostCapacityReached
		capCond.Message = fmt.Sprintf("wanted %d members more; this host holds %d %s members of the %d that %s allows, so the pool creates %d; it resumes as members go away",
			target-c.Ready-c.Creating, in.Host.Count, p.Spec.Backend.Type, in.Host.Max, cmp.Or(in.Host.Setting, "the host cap"), len(plan.Create))
	case capped:
		capCond.Reason = kobev1.ReasonMaxClustersReached
		capCond.Message = fmt.Sprintf("wanted %d members more, scaling.maxClusters %d allows %d", target-c.Ready-c.Creating, *maxClusters, len(plan.Create))
	default:
		capCond.Status, capCond.Reason = metav1.ConditionTrue, kobev1.ReasonCapacityAvailable
		capCond.Message = "the pool may create the members it wants"
	}

	niCond := metav1.Condition{Type: kobev1.ConditionNotImplemented, Status: metav1.ConditionFalse,
		Reason: kobev1.ReasonAllImplemented, Message: "every field set on the pool is acted on"}
	if fields := NotImplemented(&p.Spec, wired, in.Backend); len(fields) > 0 {
		niCond.Status, niCond.Reason = metav1.ConditionTrue, kobev1.ReasonFieldNotImplemented
		niCond.Message = "set but not acted on: " + strings.Join(fields, "; ")
	}

	switch {
	case deleting:
		plan.Phase = kobev1.PoolTerminating
	case c.Quarantined > 0:
		plan.Phase = kobev1.PoolQuarantined
	case !wired || failing != "" || warmCond.Reason == kobev1.ReasonReadinessSignalAbsent:
		plan.Phase = kobev1.PoolDegraded
	case c.Ready >= warm:
		plan.Phase = kobev1.PoolHealthy
	default:
		plan.Phase = kobev1.PoolFilling
	}

	readyCond := metav1.Condition{Type: kobev1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case plan.Phase == kobev1.PoolHealthy:
		readyCond.Status, readyCond.Reason, readyCond.Message = metav1.ConditionTrue, warmCond.Reason, warmCond.Message
	case capCond.Status == metav1.ConditionFalse && capCond.Reason != kobev1.ReasonMaxClustersReached:
		readyCond.Reason, readyCond.Message = capCond.Reason, capCond.Message
	default:
		readyCond.Reason, readyCond.Message = warmCond.Reason, warmCond.Message
	}
	plan.Conditions = []metav1.Condition{warmCond, capCond, niCond, readyCond}
	return plan
}

// targets returns the warm target, the wanted number of Ready plus Creating
// members, and the cap on members of any phase (nil: none). A fixed-size
// pool ignores the queue; a scaling pool adds one member per queued lease.
func targets(spec *kobev1.ClusterPoolSpec, queue int32) (warm, target int32, maxClusters *int32) {
	if s := spec.Scaling; s != nil {
		if s.MinReady != nil {
			warm = *s.MinReady
		}
		return warm, warm + queue, s.MaxClusters
	}
	warm = 3 // the CRD default
	if spec.Size != nil {
		warm = *spec.Size
	}
	return warm, warm, nil
}

func count(members []kobev1.ClusterInstance) Counters {
	var c Counters
	for i := range members {
		m := &members[i]
		switch classify(m) {
		case classCreating:
			c.Creating++
		case classReady:
			c.Ready++
			if m.Status.HealthFailures > 0 {
				c.Unhealthy++
			}
		case classLeased:
			c.Leased++
		case classRecycling:
			c.Recycling++
		case classQuarantined:
			c.Quarantined++
		}
	}
	return c
}

// nextOrdinal never reuses an ordinal: it is past both what the pool
// recorded and every member that exists.
func nextOrdinal(p *kobev1.ClusterPool, members []kobev1.ClusterInstance) int32 {
	next := p.Status.NextOrdinal
	for i := range members {
		next = max(next, members[i].Spec.Ordinal+1)
	}
	return next
}

// surplusMembers picks n Ready, unbound members to delete: those built from
// an older template first, then those failing probes, then the oldest.
func surplusMembers(members []kobev1.ClusterInstance, p *kobev1.ClusterPool, n int) []kobev1.ClusterInstance {
	hash := TemplateHash(&p.Spec)
	var ready []kobev1.ClusterInstance
	for i := range members {
		if classify(&members[i]) == classReady {
			ready = append(ready, members[i])
		}
	}
	slices.SortStableFunc(ready, func(a, b kobev1.ClusterInstance) int {
		return cmp.Or(
			cmpBool(a.Spec.TemplateHash != hash, b.Spec.TemplateHash != hash),
			cmp.Compare(b.Status.HealthFailures, a.Status.HealthFailures),
			cmp.Compare(a.Spec.Ordinal, b.Spec.Ordinal),
		)
	})
	return ready[:min(n, len(ready))]
}

// cmpBool orders true before false.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// absentSignals returns the gates that no member has ever been seen to pass
// while some member has been Provisioned for longer than grace, and how long
// until another member's grace runs out.
func absentSignals(p *kobev1.ClusterPool, members []kobev1.ClusterInstance, now time.Time, grace time.Duration) (absent []absentGate, requeue time.Duration) {
	for _, g := range MemberGates(p.Spec.Backend, p.Spec.ReadinessGates) {
		passed := false
		var stuck []string
		why := ""
		for i := range members {
			m := &members[i]
			if m.Status.Phase == kobev1.InstanceReady || m.Status.Phase == kobev1.InstanceLeased ||
				meta.IsStatusConditionTrue(m.Status.Conditions, g) {
				passed = true
				break
			}
			prov := meta.FindStatusCondition(m.Status.Conditions, kobev1.ConditionProvisioned)
			if classify(m) != classCreating || prov == nil || prov.Status != metav1.ConditionTrue {
				continue
			}
			if wait := prov.LastTransitionTime.Add(grace).Sub(now); wait > 0 {
				requeue = minPositive(requeue, wait)
			} else {
				stuck = append(stuck, m.Name)
				if c := meta.FindStatusCondition(m.Status.Conditions, g); why == "" && c != nil && c.Message != "" && kobev1.IsBuiltinGate(g) {
					why = m.Name + ": " + c.Message
				}
			}
		}
		if !passed && len(stuck) > 0 {
			absent = append(absent, absentGate{gate: g, stuck: stuck, why: why})
		}
	}
	if len(absent) > 0 {
		requeue = 0 // nothing more can happen by waiting alone
	}
	return absent, requeue
}

type absentGate struct {
	gate  string
	stuck []string
	// why is the first stuck member's message for a built-in gate: what it
	// waits for (a probe pod that cannot start says why).
	why string
}

func absentMessage(absent []absentGate, grace time.Duration) string {
	parts := make([]string, 0, len(absent))
	for _, a := range absent {
		what := fmt.Sprintf("no member has passed the readiness gate %q", a.gate)
		if !kobev1.IsBuiltinGate(a.gate) {
			what = fmt.Sprintf("no member has published the %q condition", a.gate)
		}
		part := fmt.Sprintf("%s (%s Provisioned for more than %s)", what, strings.Join(a.stuck, ", "), grace)
		if a.why != "" {
			part += " (" + a.why + ")"
		}
		parts = append(parts, part)
	}
	if !slices.ContainsFunc(absent, func(a absentGate) bool { return !kobev1.IsBuiltinGate(a.gate) }) {
		// Built-in gates check the member itself: nothing outside is missing.
		return strings.Join(parts, "; ") + "; the pool will not warm until its members pass them"
	}
	return strings.Join(parts, "; ") + "; spec.readinessGates names a signal nothing is setting, so the pool will never warm"
}

// backendFailing describes the first member whose backend cannot build it.
func backendFailing(members []kobev1.ClusterInstance) string {
	for i := range members {
		c := meta.FindStatusCondition(members[i].Status.Conditions, kobev1.ConditionProvisioned)
		if c != nil && c.Status == metav1.ConditionFalse &&
			(c.Reason == kobev1.ReasonBackendUnavailable || c.Reason == kobev1.ReasonProvisionFailed) {
			return fmt.Sprintf("member %s: %s: %s", members[i].Name, c.Reason, c.Message)
		}
	}
	return ""
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || b < a {
		return b
	}
	return a
}

func joinTypes(ts []kobev1.BackendType) string {
	if len(ts) == 0 {
		return "none"
	}
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}
