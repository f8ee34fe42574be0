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
	// FirstFree is the first ordinal of the pool's reserved block
	// (status.nextOrdinal is its end) that this replica has not used yet;
	// 0 when it knows of none (a restart), so that the rest of the block is
	// skipped: ordinals are never reused.
	FirstFree int32
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
	// Bundles are the content digests (BundleDigest) of the pool's
	// BootstrapConfigs by name; a bundle that does not exist is absent.
	Bundles map[string]string
	// JobBundles names the pool's BootstrapConfigs that run a Job when
	// this operator cannot run them for the pool (JobsRefusal says why):
	// the pool builds no member (each would fail) and says so in its
	// Capacity condition.
	JobBundles  []string
	JobsRefusal string
	// NetworkPolicy is whether the host cluster enforces the NetworkPolicy
	// that isolates a kubernetes backend member; nil when nobody judged it
	// (other backends). It becomes the NetworkPolicyEnforced condition.
	NetworkPolicy *NetworkPolicyCheck
	// DefaultNodes is what the wired backend gives a member when the pool
	// leaves its nodes field unset (zero: no node).
	DefaultNodes NodeDefault
	// Limits are the operator's defaults and ceilings of member limits.
	Limits LimitPolicy
	// LimitsRefusal is why the wired backend cannot enforce member limits
	// on this operator (backend.LimitEnforcer); empty when it can.
	LimitsRefusal string
}

// NetworkPolicyCheck is the prober's verdict as a pool sees it.
type NetworkPolicyCheck struct {
	// Condition is NetworkPolicyEnforced as the verdict states it (without
	// observedGeneration and transition time).
	Condition metav1.Condition
	// Required: unless Condition is True the pool builds and hands out
	// nothing (--require-network-policy-enforcement).
	Required bool
}

// refuses reports whether c keeps the pool from building members.
func (c *NetworkPolicyCheck) refuses() bool {
	return c != nil && c.Required && c.Condition.Status != metav1.ConditionTrue
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
	// Freezing is whether the backend freezes warm members here; when not,
	// FreezingRefusal says why (warm.running is then not acted on).
	Freezing        bool
	FreezingRefusal string
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
	// Delete lists the unbound members to remove, each with why: Ready ones
	// scaled down or replaced (outdated, idle too long), and Creating ones
	// of an older template. The caller deletes each with its UID and
	// resourceVersion as preconditions.
	Delete []Removal
	// NextOrdinal is the ordinal after every one used so far, including
	// Create. Beyond status.nextOrdinal, the caller reserves more first.
	NextOrdinal int32
	// TemplateHash is what members are built from now: new members carry
	// it, members without it are outdated (status.templateHash).
	TemplateHash string
	// MemberBackend is the backend spec new members are built with: the
	// pool's, with its nodes resolved (WithDefaultNodes).
	MemberBackend kobev1.BackendSpec
	// MemberLimits are the limits new members are built with (the pool's
	// cluster.limits resolved by Input.Limits; nil for backends that run
	// nothing on a host): status.memberLimits.
	MemberLimits *kobev1.MemberLimits
	Counters     Counters
	// Outdated counts the unbound Ready and Creating members the pool
	// replaces (status.outdated).
	Outdated int32
	// Pressure is whether demand presses on the pool now; the caller then
	// records status.lastPressure, which scale-down waits on.
	Pressure bool
	Phase    kobev1.PoolPhase
	// Conditions are Warm, Capacity, Provisioning, DemandCovered (scaling
	// pools with a demand measurement only), FieldNotImplemented and Ready,
	// without observedGeneration and transition times.
	Conditions []metav1.Condition
	// RequeueAfter is when a decision changes with time alone; zero if never.
	RequeueAfter time.Duration
}

// StatusCounters are the counts the pool's status reports with this plan:
// Counters plus the members Create adds, as Creating. The status is written
// before the creates (it reserves their ordinals), so this saves the pool a
// second write only to count them; a create that fails is counted right
// again at the next decision.
func (p Plan) StatusCounters() Counters {
	c := p.Counters
	c.Creating += int32(len(p.Create))
	return c
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
	// Members are built from the pool's spec with its nodes resolved, and
	// that is what the hash identifies: a pool whose default changed (the
	// operator can now run nodes) replaces its members like any change.
	built := *p.Spec.DeepCopy()
	built.Backend = WithDefaultNodes(p.Spec.Backend, in.DefaultNodes)
	// Limits too: members built before the operator's limits changed are
	// replaced like any change, so no member keeps looser limits.
	limits, limitsCond := memberLimits(&p.Spec, in.Limits, in.LimitsRefusal)
	built.Cluster.Limits = limits
	hash := TemplateHashWith(&built, in.Bundles)
	plan := Plan{Counters: count(in.Members), NextOrdinal: nextOrdinal(p, in.Members, in.FirstFree), TemplateHash: hash,
		MemberBackend: built.Backend, MemberLimits: limits}
	c := plan.Counters
	wired := slices.Contains(in.Wired, p.Spec.Backend.Type)
	// buildable: wired, and nothing the pool asks for is refused here.
	buildable := wired && len(in.JobBundles) == 0 && !in.NetworkPolicy.refuses() && VersionRefusal(&p.Spec, in.Backend) == ""
	deleting := !p.DeletionTimestamp.IsZero()

	sz := sizeFor(p, c, in.QueueDepth)
	r := survey(p, in.Members, hash, in.Now)
	plan.Target, plan.Pressure, plan.Outdated = sz.target, sz.pressure, r.outdated()
	var ch changes
	if !deleting && buildable {
		ch = decideChanges(&in, sz, &r, c, hash)
		for range ch.create {
			plan.Create = append(plan.Create, plan.NextOrdinal)
			plan.NextOrdinal++
		}
		plan.Delete = ch.remove
	}

	grace := cmp.Or(in.SignalGrace, DefaultSignalGrace)
	absent, requeue := absentSignals(p, RealNodes(built.Backend), in.Members, in.Now, grace)
	failing := backendFailing(in.Members)
	// A member that fails while the pool is short keeps it short.
	failingShort := p.Status.Failures > 0 && c.Ready < sz.warm

	// The message counts the members this plan creates as Creating, as the
	// status the pool writes with it does (StatusCounters): the status
	// written before the creates then already says what they bring.
	warmCond := warmCondition(plan.StatusCounters(), sz.warm, absent, grace)
	capCond := capacityCondition(&in, &plan, sz, ch, wired, failing)
	provCond := provisioningCondition(p)
	niCond := notImplementedCondition(&p.Spec, wired, in.Backend)
	plan.Phase = phase(deleting, buildable, failing != "" || failingShort, c, sz.warm, warmCond)
	readyCond := readyCondition(plan.Phase, warmCond, capCond, provCond, failingShort)
	plan.Conditions = []metav1.Condition{warmCond, capCond, provCond}
	if dc := demandCoveredCondition(p, sz.warm); dc != nil {
		plan.Conditions = append(plan.Conditions, *dc)
	}
	if in.NetworkPolicy != nil {
		plan.Conditions = append(plan.Conditions, in.NetworkPolicy.Condition)
	}
	if nc := nodesCondition(&p.Spec, in.DefaultNodes); nc != nil && wired {
		plan.Conditions = append(plan.Conditions, *nc)
	}
	if limitsCond != nil && wired {
		plan.Conditions = append(plan.Conditions, *limitsCond)
	}
	plan.Conditions = append(plan.Conditions, niCond, readyCond)

	// Every change that time alone brings: a gate's grace running out, the
	// create backoff ending, scale-down becoming allowed, a member reaching
	// maxIdle.
	for _, d := range []time.Duration{ch.backoff, ch.scaleDownIn, ch.idleIn} {
		requeue = minPositive(requeue, d)
	}
	plan.RequeueAfter = requeue
	return plan
}

// phase summarises the pool: Terminating, Quarantined, Degraded (the
// backend is not wired or fails, a readiness signal is absent, or members
// fail while the pool is short), Healthy (warm) or Filling.
func phase(deleting, wired, failing bool, c Counters, warm int32, warmCond metav1.Condition) kobev1.PoolPhase {
	switch {
	case deleting:
		return kobev1.PoolTerminating
	case c.Quarantined > 0:
		return kobev1.PoolQuarantined
	case !wired || failing || warmCond.Reason == kobev1.ReasonReadinessSignalAbsent:
		return kobev1.PoolDegraded
	case c.Ready >= warm:
		return kobev1.PoolHealthy
	}
	return kobev1.PoolFilling
}

// readyCondition is the summary: what keeps the pool from Healthy, the
// most specific cause first.
func readyCondition(ph kobev1.PoolPhase, warmCond, capCond, provCond metav1.Condition, failingShort bool) metav1.Condition {
	c := metav1.Condition{Type: kobev1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case ph == kobev1.PoolHealthy:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, warmCond.Reason, warmCond.Message
	case capCond.Status == metav1.ConditionFalse && capCond.Reason != kobev1.ReasonMaxClustersReached:
		c.Reason, c.Message = capCond.Reason, capCond.Message
	case failingShort && warmCond.Reason != kobev1.ReasonReadinessSignalAbsent:
		c.Reason, c.Message = provCond.Reason, provCond.Message
	default:
		c.Reason, c.Message = warmCond.Reason, warmCond.Message
	}
	return c
}

func warmCondition(c Counters, warm int32, absent []absentGate, grace time.Duration) metav1.Condition {
	cond := metav1.Condition{Type: kobev1.ConditionWarm}
	switch {
	case c.Ready >= warm:
		cond.Status, cond.Reason = metav1.ConditionTrue, kobev1.ReasonWarm
		cond.Message = fmt.Sprintf("%d of %d warm members are Ready", c.Ready, warm)
	case len(absent) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, kobev1.ReasonReadinessSignalAbsent
		cond.Message = absentMessage(absent, grace)
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, kobev1.ReasonFilling
		cond.Message = fmt.Sprintf("%d of %d warm members are Ready, %d Creating", c.Ready, warm, c.Creating)
	}
	return cond
}

// capacityCondition says whether the pool may create what it wants, and
// what holds it back.
func capacityCondition(in *Input, plan *Plan, sz sizing, ch changes, wired bool, failing string) metav1.Condition {
	p := in.Pool
	cond := metav1.Condition{Type: kobev1.ConditionCapacity, Status: metav1.ConditionFalse}
	switch {
	case !wired:
		cond.Reason = kobev1.ReasonBackendUnavailable
		cond.Message = fmt.Sprintf("backend %q is not wired in this operator; wired backends: %s", p.Spec.Backend.Type, joinTypes(in.Wired))
		if p.Spec.Backend.Type == kobev1.BackendSim {
			// Never a default: simulated members' kubeconfigs point at nothing.
			cond.Message += "; start the operator with --enable-sim-backend to serve simulated members (benchmarks and demos only)"
		}
	case VersionRefusal(&p.Spec, in.Backend) != "":
		cond.Reason = kobev1.ReasonVersionUnavailable
		cond.Message = VersionRefusal(&p.Spec, in.Backend) + ": the pool builds and hands out no member; set cluster.version to one of those, or give the operator binaries of that version"
	case in.NetworkPolicy.refuses():
		np := in.NetworkPolicy.Condition
		cond.Reason = kobev1.ReasonNetworkPolicyNotEnforced
		cond.Message = fmt.Sprintf("the host cluster is not proven to enforce NetworkPolicy, which isolates each member (%s: %s): the pool builds and hands out no member; use a CNI that enforces it, or start the operator with --require-network-policy-enforcement=false to accept members that are not isolated",
			np.Reason, np.Message)
	case len(in.JobBundles) > 0:
		cond.Reason = kobev1.ReasonBootstrapJobsUnsupported
		cond.Message = fmt.Sprintf("BootstrapConfig %s runs a Job, which %s: the pool builds no member",
			strings.Join(in.JobBundles, ", "), cmp.Or(in.JobsRefusal, "this operator cannot run"))
	case failing != "":
		cond.Reason, cond.Message = kobev1.ReasonBackendFailing, failing
	case ch.backoff > 0:
		cond.Reason, cond.Message = kobev1.ReasonCreateBackoff, backoffMessage(&p.Status, ch.backoff)
	case ch.hostCapped:
		cond.Reason = kobev1.ReasonHostCapacityReached
		cond.Message = fmt.Sprintf("wanted %d members more; this host holds %d %s members of the %d that %s allows, so the pool creates %d; it resumes as members go away",
			ch.wanted, in.Host.Count, p.Spec.Backend.Type, in.Host.Max, cmp.Or(in.Host.Setting, "the host cap"), len(plan.Create))
	case ch.capped:
		cond.Reason = kobev1.ReasonMaxClustersReached
		cond.Message = fmt.Sprintf("wanted %d members more, scaling.maxClusters %d allows %d", ch.wanted, *sz.maxClusters, len(plan.Create))
		if ch.oneAtATime {
			cond.Message += "; outdated members are replaced one at a time"
		}
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, kobev1.ReasonCapacityAvailable
		cond.Message = "the pool may create the members it wants"
	}
	return cond
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

// nextOrdinal never reuses an ordinal: it is past every member that exists
// and past what this replica used of the reserved block (firstFree); with
// no such knowledge, past the whole block (status.nextOrdinal). A firstFree
// beyond the block (a pool read from a lagging cache) asks for a new
// reservation, whose fenced write fails on that pool.
func nextOrdinal(p *kobev1.ClusterPool, members []kobev1.ClusterInstance, firstFree int32) int32 {
	next := p.Status.NextOrdinal
	if firstFree > 0 {
		next = firstFree
	}
	for i := range members {
		next = max(next, members[i].Spec.Ordinal+1)
	}
	return next
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
func absentSignals(p *kobev1.ClusterPool, nodes int32, members []kobev1.ClusterInstance, now time.Time, grace time.Duration) (absent []absentGate, requeue time.Duration) {
	for _, gate := range MemberGates(nodes, p.Spec.ReadinessGates) {
		g, builtin := gate.Key(), kobev1.IsBuiltinGate(gate.Type)
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
			if boot := meta.FindStatusCondition(m.Status.Conditions, kobev1.ConditionBootstrapsComplete); boot != nil && boot.Status != metav1.ConditionTrue {
				continue // its gates run once its bootstraps are applied
			}
			if wait := prov.LastTransitionTime.Add(grace).Sub(now); wait > 0 {
				requeue = minPositive(requeue, wait)
			} else {
				stuck = append(stuck, m.Name)
				if c := meta.FindStatusCondition(m.Status.Conditions, g); why == "" && c != nil && c.Message != "" && builtin {
					why = m.Name + ": " + c.Message
				}
			}
		}
		if !passed && len(stuck) > 0 {
			absent = append(absent, absentGate{gate: g, builtin: builtin, stuck: stuck, why: why})
		}
	}
	if len(absent) > 0 {
		requeue = 0 // nothing more can happen by waiting alone
	}
	return absent, requeue
}

type absentGate struct {
	// gate is the gate's key (its name, or its type), builtin whether the
	// operator evaluates its type.
	gate    string
	builtin bool
	stuck   []string
	// why is the first stuck member's message for a built-in gate: what it
	// waits for (a probe pod that cannot start says why).
	why string
}

func absentMessage(absent []absentGate, grace time.Duration) string {
	parts := make([]string, 0, len(absent))
	for _, a := range absent {
		what := fmt.Sprintf("no member has passed the readiness gate %q", a.gate)
		if !a.builtin {
			what = fmt.Sprintf("no member has published the %q condition", a.gate)
		}
		part := fmt.Sprintf("%s (%s Provisioned for more than %s)", what, strings.Join(a.stuck, ", "), grace)
		if a.why != "" {
			part += " (" + a.why + ")"
		}
		parts = append(parts, part)
	}
	if !slices.ContainsFunc(absent, func(a absentGate) bool { return !a.builtin }) {
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

// minPositive is the shorter of two waits, where 0 (or less) means none.
func minPositive(a, b time.Duration) time.Duration {
	if b > 0 && (a <= 0 || b < a) {
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
