package pool

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

var now = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

var local = []kobev1.BackendType{kobev1.BackendLocal}

func testPool(mut ...func(*kobev1.ClusterPool)) *kobev1.ClusterPool {
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: "ns", UID: "pool-uid", Generation: 1},
		Spec: kobev1.ClusterPoolSpec{
			Size:    ptr.To[int32](2),
			Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal},
		},
	}
	for _, f := range mut {
		f(p)
	}
	return p
}

// member builds a member of testPool with ordinal n in phase ph.
func member(n int32, ph kobev1.InstancePhase, mut ...func(*kobev1.ClusterInstance)) kobev1.ClusterInstance {
	m := NewMember(testPool(), n, TemplateHash(&testPool().Spec))
	m.UID = types.UID("uid-" + MemberName("ci", n))
	m.ResourceVersion = "1"
	m.Status.Phase = ph
	for _, f := range mut {
		f(m)
	}
	return *m
}

func bound(m *kobev1.ClusterInstance) {
	m.Spec.LeaseRef = &kobev1.LeaseBinding{Name: "l", UID: "l-uid"}
}
func deleting(m *kobev1.ClusterInstance) {
	t := metav1.NewTime(now)
	m.DeletionTimestamp = &t
}
func failures(n int32) func(*kobev1.ClusterInstance) {
	return func(m *kobev1.ClusterInstance) { m.Status.HealthFailures = n }
}
func provisionedAgo(d time.Duration) func(*kobev1.ClusterInstance) {
	return func(m *kobev1.ClusterInstance) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{
			Type: kobev1.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: kobev1.ReasonProvisioned,
			LastTransitionTime: metav1.NewTime(now.Add(-d)),
		})
	}
}
func condition(t string, s metav1.ConditionStatus, reason string) func(*kobev1.ClusterInstance) {
	return func(m *kobev1.ClusterInstance) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: "boom",
			LastTransitionTime: metav1.NewTime(now)})
	}
}

// builtFrom makes a member built from p's template.
func builtFrom(p *kobev1.ClusterPool) func(*kobev1.ClusterInstance) {
	return func(m *kobev1.ClusterInstance) { m.Spec.TemplateHash = TemplateHash(&p.Spec) }
}
func gate(t string) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) {
		p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, kobev1.ReadinessGate{Type: t})
	}
}
func nodes(n int32) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) { p.Spec.Backend.Local = &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](n)} }
}
func size(n int32) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) { p.Spec.Size = ptr.To(n) }
}
func scaling(minReady, maxClusters int32) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) {
		p.Spec.Scaling = &kobev1.ScalingSpec{MinReady: ptr.To(minReady), MaxClusters: ptr.To(maxClusters)}
	}
}

// want is what a planner case expects; an empty conds or msgContains
// checks nothing there, and delete lists "member:Reason".
type want struct {
	create      []int32
	delete      []string
	next        int32
	counters    Counters
	phase       kobev1.PoolPhase
	conds       map[string]string // type -> "Status/Reason"
	msgContains map[string]string // type -> substring of the message
	requeue     time.Duration
}

// decide runs Decide at now, with the local backend wired unless the case
// says otherwise.
func decide(in Input) Plan {
	if in.Wired == nil {
		in.Wired = local
	}
	if in.Now.IsZero() {
		in.Now = now
	}
	return Decide(in)
}

// deleted lists a plan's removals as "member:Reason".
func deleted(p Plan) []string {
	var out []string
	for _, rm := range p.Delete {
		out = append(out, rm.Member.Name+":"+rm.Reason)
	}
	return out
}

func checkPlan(t *testing.T, got Plan, w want) {
	t.Helper()
	if !equalInts(got.Create, w.create) {
		t.Errorf("Create = %v, want %v", got.Create, w.create)
	}
	if del := deleted(got); strings.Join(del, ",") != strings.Join(w.delete, ",") {
		t.Errorf("Delete = %v, want %v", del, w.delete)
	}
	if got.NextOrdinal != w.next {
		t.Errorf("NextOrdinal = %d, want %d", got.NextOrdinal, w.next)
	}
	if got.Counters != w.counters {
		t.Errorf("Counters = %+v, want %+v", got.Counters, w.counters)
	}
	if got.Phase != w.phase {
		t.Errorf("Phase = %s, want %s", got.Phase, w.phase)
	}
	if got.RequeueAfter != w.requeue {
		t.Errorf("RequeueAfter = %s, want %s", got.RequeueAfter, w.requeue)
	}
	for typ, sr := range w.conds {
		c := meta.FindStatusCondition(got.Conditions, typ)
		if c == nil || string(c.Status)+"/"+c.Reason != sr {
			t.Errorf("condition %s = %+v, want %s", typ, c, sr)
		}
	}
	for typ, sub := range w.msgContains {
		c := meta.FindStatusCondition(got.Conditions, typ)
		if c == nil || !strings.Contains(c.Message, sub) {
			t.Errorf("condition %s = %+v, want its message to contain %q", typ, c, sub)
		}
	}
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name string
		in   Input
		want want
	}{{
		name: "empty pool fills to size",
		in:   Input{Pool: testPool()},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolFilling,
			conds:       map[string]string{"Warm": "False/Filling", "Capacity": "True/CapacityAvailable", "FieldNotImplemented": "False/AllImplemented", "Ready": "False/Filling"},
			msgContains: map[string]string{"Warm": "0 of 2 warm members are Ready, 2 Creating"}},
	}, {
		name: "ordinals are never reused: status.nextOrdinal wins over members",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Status.NextOrdinal = 7 }),
			Members: []kobev1.ClusterInstance{member(2, kobev1.InstanceReady)}},
		want: want{create: []int32{7}, next: 8, counters: Counters{Ready: 1}, phase: kobev1.PoolFilling},
	}, {
		name: "ordinals are never reused: members win over a stale status",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Status.NextOrdinal = 1 }),
			Members: []kobev1.ClusterInstance{member(5, kobev1.InstanceReady)}},
		want: want{create: []int32{6}, next: 7, counters: Counters{Ready: 1}, phase: kobev1.PoolFilling},
	}, {
		name: "a replica's first free ordinal within the reserved block is used next",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Status.NextOrdinal = 20 }), FirstFree: 5,
			Members: []kobev1.ClusterInstance{member(4, kobev1.InstanceReady)}},
		want: want{create: []int32{5}, next: 6, counters: Counters{Ready: 1}, phase: kobev1.PoolFilling},
	}, {
		name: "members past the first free ordinal win: it is never reused",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Status.NextOrdinal = 20 }), FirstFree: 3,
			Members: []kobev1.ClusterInstance{member(9, kobev1.InstanceReady)}},
		want: want{create: []int32{10}, next: 11, counters: Counters{Ready: 1}, phase: kobev1.PoolFilling},
	}, {
		name: "a first free ordinal beyond the reserved block (a lagging cache's pool) is kept: the caller must reserve",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Status.NextOrdinal = 20 }), FirstFree: 30,
			Members: []kobev1.ClusterInstance{member(4, kobev1.InstanceReady)}},
		want: want{create: []int32{30}, next: 31, counters: Counters{Ready: 1}, phase: kobev1.PoolFilling},
	}, {
		name: "warm pool does nothing",
		in: Input{Pool: testPool(), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady), member(1, kobev1.InstanceReady)}},
		want: want{next: 2, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy,
			conds: map[string]string{"Warm": "True/Warm", "Ready": "True/Warm"}},
	}, {
		name: "a member without a phase counts as Creating",
		in: Input{Pool: testPool(), Members: []kobev1.ClusterInstance{
			member(0, ""), member(1, kobev1.InstanceCreating)}},
		want: want{next: 2, counters: Counters{Creating: 2}, phase: kobev1.PoolFilling},
	}, {
		name: "leased, bound, recycling and deleting members are replaced",
		in: Input{Pool: testPool(size(4)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceLeased, bound),
			member(1, kobev1.InstanceReady, bound), // bind seen before the instance controller
			member(2, kobev1.InstanceRecycling),
			member(3, kobev1.InstanceReady, deleting),
			member(4, kobev1.InstanceReady),
		}},
		want: want{create: []int32{5, 6, 7}, next: 8, counters: Counters{Ready: 1, Leased: 2, Recycling: 2}, phase: kobev1.PoolFilling},
	}, {
		name: "unhealthy Ready members count in ready and unhealthy",
		in: Input{Pool: testPool(), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady, failures(1)), member(1, kobev1.InstanceReady)}},
		want: want{next: 2, counters: Counters{Ready: 2, Unhealthy: 1}, phase: kobev1.PoolHealthy},
	}, {
		name: "scale down deletes Ready members only: stale template, then unhealthy, then oldest",
		in: Input{Pool: testPool(size(1)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady),
			member(1, kobev1.InstanceReady, failures(1)),
			member(2, kobev1.InstanceReady, func(m *kobev1.ClusterInstance) { m.Spec.TemplateHash = "old" }),
			member(3, kobev1.InstanceReady),
			member(4, kobev1.InstanceLeased, bound),
			member(5, kobev1.InstanceCreating),
		}},
		want: want{next: 6, delete: []string{"pool-ci-2:Outdated", "pool-ci-1:ScaledDown", "pool-ci-0:ScaledDown"},
			counters: Counters{Ready: 4, Unhealthy: 1, Leased: 1, Creating: 1}, phase: kobev1.PoolHealthy},
	}, {
		name: "scale down never deletes Creating members, and keeps Ready ones while Creating ones are pending",
		in: Input{Pool: testPool(size(1)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady), member(1, kobev1.InstanceCreating), member(2, kobev1.InstanceCreating)}},
		want: want{next: 3, counters: Counters{Ready: 1, Creating: 2}, phase: kobev1.PoolHealthy},
	}, {
		name: "scale down to zero",
		in: Input{Pool: testPool(size(0)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceReady), member(1, kobev1.InstanceLeased, bound)}},
		want: want{next: 2, delete: []string{"pool-ci-0:ScaledDown"}, counters: Counters{Ready: 1, Leased: 1}, phase: kobev1.PoolHealthy},
	}, {
		name: "backend not wired: nothing created, Degraded, message names the wired backends",
		in:   Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Spec.Backend.Type = kobev1.BackendK3s }), Wired: local},
		want: want{next: 0, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"Capacity": "False/BackendUnavailable", "Ready": "False/BackendUnavailable"},
			msgContains: map[string]string{"Capacity": `backend "k3s" is not wired in this operator; wired backends: local`}},
	}, {
		name: "sim backend not wired: nothing created, the message names the operator flag",
		in:   Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Spec.Backend.Type = kobev1.BackendSim }), Wired: local},
		want: want{next: 0, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"Capacity": "False/BackendUnavailable", "Ready": "False/BackendUnavailable"},
			msgContains: map[string]string{"Capacity": `backend "sim" is not wired in this operator; wired backends: local; start the operator with --enable-sim-backend`}},
	}, {
		name: "a bundle that runs a Job: nothing created, the message names the bundle",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Spec.Bootstraps = []kobev1.BootstrapRef{{Name: "flux"}, {Name: "helm"}} }),
			JobBundles: []string{"helm"}, JobsRefusal: "this operator does not run (its host cluster has no nodes; --bootstrap-jobs is off)"},
		want: want{next: 0, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"Capacity": "False/BootstrapJobsUnsupported", "Ready": "False/BootstrapJobsUnsupported"},
			msgContains: map[string]string{"Capacity": "BootstrapConfig helm runs a Job, which this operator does not run (its host cluster has no nodes; --bootstrap-jobs is off): the pool builds no member"}},
	}, {
		name: "NetworkPolicy not enforced and required: nothing created, Ready members kept, Degraded, both conditions say why",
		in: Input{Pool: testPool(size(3)), Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady)},
			NetworkPolicy: netpol(metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced, true)},
		want: want{next: 1, counters: Counters{Ready: 1}, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Capacity": "False/NetworkPolicyNotEnforced", "Ready": "False/NetworkPolicyNotEnforced",
				"NetworkPolicyEnforced": "False/NetworkPolicyNotEnforced"},
			msgContains: map[string]string{"Capacity": "not proven to enforce NetworkPolicy, which isolates each member (NetworkPolicyNotEnforced: verdict): the pool builds and hands out no member; use a CNI that enforces it, or start the operator with --require-network-policy-enforcement=false"}},
	}, {
		name: "NetworkPolicy not probed yet and required: fails closed",
		in:   Input{Pool: testPool(), NetworkPolicy: netpol(metav1.ConditionUnknown, kobev1.ReasonNetworkPolicyProbePending, true)},
		want: want{next: 0, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Capacity": "False/NetworkPolicyNotEnforced", "NetworkPolicyEnforced": "Unknown/NetworkPolicyProbePending"}},
	}, {
		name: "NetworkPolicy not enforced, not required (opted out): the pool fills and still says so",
		in:   Input{Pool: testPool(), NetworkPolicy: netpol(metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced, false)},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "True/CapacityAvailable", "NetworkPolicyEnforced": "False/NetworkPolicyNotEnforced"}},
	}, {
		name: "NetworkPolicy enforced and required: the pool fills",
		in:   Input{Pool: testPool(), NetworkPolicy: netpol(metav1.ConditionTrue, kobev1.ReasonNetworkPolicyEnforced, true)},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "True/CapacityAvailable", "NetworkPolicyEnforced": "True/NetworkPolicyEnforced"}},
	}, {
		name: "a member the backend cannot build makes the pool Degraded with BackendFailing",
		in: Input{Pool: testPool(), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating, condition(kobev1.ConditionProvisioned, metav1.ConditionFalse, kobev1.ReasonBackendUnavailable)),
			member(1, kobev1.InstanceCreating)}},
		want: want{next: 2, counters: Counters{Creating: 2}, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"Capacity": "False/BackendFailing"},
			msgContains: map[string]string{"Capacity": "member pool-ci-0: BackendUnavailable: boom"}},
	}, {
		name: "scaling: minReady plus queue",
		in:   Input{Pool: testPool(scaling(1, 10)), QueueDepth: 2},
		want: want{create: []int32{0, 1, 2}, next: 3, phase: kobev1.PoolFilling},
	}, {
		name: "scaling: maxClusters caps members of any phase",
		in: Input{Pool: testPool(scaling(2, 3)), QueueDepth: 2, Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceLeased, bound), member(1, kobev1.InstanceRecycling)}},
		want: want{create: []int32{2}, next: 3, counters: Counters{Leased: 1, Recycling: 1}, phase: kobev1.PoolFilling,
			conds:       map[string]string{"Capacity": "False/MaxClustersReached", "Ready": "False/Filling"},
			msgContains: map[string]string{"Capacity": "wanted 4 members more, scaling.maxClusters 3 allows 1"}},
	}, {
		name: "scaling: a fixed-size pool ignores the queue",
		in:   Input{Pool: testPool(size(1)), QueueDepth: 5, Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady)}},
		want: want{next: 1, counters: Counters{Ready: 1}, phase: kobev1.PoolHealthy},
	}, {
		name: "readiness signal absent once a member is Provisioned longer than the grace",
		in: Input{Pool: testPool(gate("ExternalSignal")), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating, provisionedAgo(31*time.Second),
				condition("APIServerReachable", metav1.ConditionTrue, "GatePassed"),
				condition("InClusterToken", metav1.ConditionTrue, "GatePassed")),
			member(1, kobev1.InstanceCreating, provisionedAgo(5*time.Second)),
		}},
		want: want{next: 2, counters: Counters{Creating: 2}, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"Warm": "False/ReadinessSignalAbsent", "Ready": "False/ReadinessSignalAbsent"},
			msgContains: map[string]string{"Warm": `no member has published the "ExternalSignal" condition (pool-ci-0 Provisioned for more than 30s)`}},
	}, {
		name: "readiness signal absent: of two gates of one type, the one no member passes is named, with why",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) {
			p.Spec.ReadinessGates = []kobev1.ReadinessGate{
				{Type: kobev1.GateCRDExists, Name: "WidgetsAPI", CRD: &kobev1.CRDGate{Name: "widgets.example.com"}},
				{Type: kobev1.GateCRDExists, Name: "GadgetsAPI", CRD: &kobev1.CRDGate{Name: "gadgets.example.com"}},
			}
		}), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating, provisionedAgo(31*time.Second),
				condition("APIServerReachable", metav1.ConditionTrue, "GatePassed"),
				condition("InClusterToken", metav1.ConditionTrue, "GatePassed"),
				condition("WidgetsAPI", metav1.ConditionTrue, "GatePassed"),
				condition("GadgetsAPI", metav1.ConditionFalse, "GatePending")),
		}},
		want: want{next: 2, create: []int32{1}, counters: Counters{Creating: 1}, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Warm": "False/ReadinessSignalAbsent"},
			msgContains: map[string]string{"Warm": `no member has passed the readiness gate "GadgetsAPI" (pool-ci-0 Provisioned for more than 30s) (pool-ci-0: boom); ` +
				"the pool will not warm until its members pass them"}},
	}, {
		name: "readiness signal: a member still applying its bootstraps has run no gate yet",
		in: Input{Pool: testPool(gate("ExternalSignal"), size(1)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating, provisionedAgo(time.Hour),
				condition(kobev1.ConditionBootstrapsComplete, metav1.ConditionFalse, kobev1.ReasonBootstrapsApplying)),
		}},
		want: want{next: 1, counters: Counters{Creating: 1}, phase: kobev1.PoolFilling,
			conds: map[string]string{"Warm": "False/Filling"}},
	}, {
		name: "readiness signal: within the grace the pool is Filling and requeues when it ends",
		in: Input{Pool: testPool(gate("ExternalSignal")), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating, provisionedAgo(20*time.Second)),
			member(1, kobev1.InstanceCreating, provisionedAgo(25*time.Second)),
		}},
		want: want{next: 2, counters: Counters{Creating: 2}, phase: kobev1.PoolFilling, requeue: 5 * time.Second,
			conds: map[string]string{"Warm": "False/Filling"}},
	}, {
		name: "readiness signal: one member that ever passed the gate is enough",
		in: Input{Pool: testPool(gate("ExternalSignal")), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceLeased, bound),
			member(1, kobev1.InstanceCreating, provisionedAgo(time.Hour)),
		}},
		want: want{next: 3, create: []int32{2}, counters: Counters{Leased: 1, Creating: 1}, phase: kobev1.PoolFilling,
			conds: map[string]string{"Warm": "False/Filling"}},
	}, {
		name: "readiness signal: the grace is an option",
		in: Input{Pool: testPool(size(1), gate("NodesReady")), SignalGrace: 2 * time.Second, Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating, provisionedAgo(3*time.Second))}},
		want: want{next: 1, counters: Counters{Creating: 1}, phase: kobev1.PoolDegraded,
			msgContains: map[string]string{"Warm": `no member has passed the readiness gate "APIServerReachable"`}},
	}, {
		name: "host cap not reached: the pool creates what it wants",
		in:   Input{Pool: testPool(size(3)), Host: HostBudget{Max: 16, Count: 13, Setting: "--local-max-members"}},
		want: want{create: []int32{0, 1, 2}, next: 3, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "True/CapacityAvailable"}},
	}, {
		name: "host cap reached: the pool creates nothing and names the cap, the count and the flag",
		in: Input{Pool: testPool(size(3)), Host: HostBudget{Max: 4, Count: 5, Setting: "--local-max-members"},
			Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady)}},
		want: want{next: 1, counters: Counters{Ready: 1}, phase: kobev1.PoolFilling,
			conds:       map[string]string{"Capacity": "False/HostCapacityReached", "Ready": "False/HostCapacityReached", "Warm": "False/Filling"},
			msgContains: map[string]string{"Capacity": "wanted 2 members more; this host holds 5 local members of the 4 that --local-max-members allows, so the pool creates 0"}},
	}, {
		name: "host cap: the pool creates up to the cap and says it was held back",
		in:   Input{Pool: testPool(size(3)), Host: HostBudget{Max: 16, Count: 14, Setting: "--local-max-members"}},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolFilling,
			conds:       map[string]string{"Capacity": "False/HostCapacityReached"},
			msgContains: map[string]string{"Capacity": "holds 14 local members of the 16 that --local-max-members allows, so the pool creates 2"}},
	}, {
		name: "host cap: a warm pool at the cap wants nothing and has capacity",
		in: Input{Pool: testPool(size(1)), Host: HostBudget{Max: 1, Count: 1},
			Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady)}},
		want: want{next: 1, counters: Counters{Ready: 1}, phase: kobev1.PoolHealthy,
			conds: map[string]string{"Capacity": "True/CapacityAvailable", "Ready": "True/Warm"}},
	}, {
		name: "host cap tighter than maxClusters wins",
		in:   Input{Pool: testPool(scaling(5, 3)), Host: HostBudget{Max: 10, Count: 9, Setting: "--local-max-members"}},
		want: want{create: []int32{0}, next: 1, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "False/HostCapacityReached"}},
	}, {
		name: "maxClusters tighter than the host cap wins",
		in:   Input{Pool: testPool(scaling(5, 1)), Host: HostBudget{Max: 10, Count: 2}},
		want: want{create: []int32{0}, next: 1, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "False/MaxClustersReached"}},
	}, {
		name: "a member with real nodes waits for NodesReady and DNSHealthy though the pool does not list them, and the pool says why",
		in: Input{Pool: testPool(size(1), nodes(1)), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceCreating, builtFrom(testPool(size(1), nodes(1))), provisionedAgo(31*time.Second),
				condition("APIServerReachable", metav1.ConditionTrue, "GatePassed"),
				condition("InClusterToken", metav1.ConditionTrue, "GatePassed"),
				condition("NodesReady", metav1.ConditionFalse, "GatePending"))}},
		want: want{next: 1, counters: Counters{Creating: 1}, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"Warm": "False/ReadinessSignalAbsent"},
			msgContains: map[string]string{"Warm": `no member has passed the readiness gate "NodesReady" (pool-ci-0 Provisioned for more than 30s) (pool-ci-0: boom); no member has passed the readiness gate "DNSHealthy" (pool-ci-0 Provisioned for more than 30s); the pool will not warm until its members pass them`}},
	}, {
		name: "quarantined members make the pool Quarantined",
		in: Input{Pool: testPool(), Members: []kobev1.ClusterInstance{
			member(0, kobev1.InstanceQuarantined), member(1, kobev1.InstanceReady), member(2, kobev1.InstanceReady)}},
		want: want{next: 3, counters: Counters{Ready: 2, Quarantined: 1}, phase: kobev1.PoolQuarantined},
	}, {
		name: "a pool being deleted plans nothing",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) {
			ts := metav1.NewTime(now)
			p.DeletionTimestamp = &ts
		}), Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady)}},
		want: want{next: 1, counters: Counters{Ready: 1}, phase: kobev1.PoolTerminating},
	}, {
		name: "fields set but not implemented are named",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) {
			p.Spec.Bootstraps = []kobev1.BootstrapRef{{Name: "flux"}}
			p.Spec.Snapshot = &kobev1.SnapshotSpec{Velero: kobev1.VeleroSnapshot{BackupName: "golden"}}
			p.Spec.Scaling = &kobev1.ScalingSpec{ScaleUpThreshold: ptr.To[int32](0), ScaleDownAfter: &metav1.Duration{Duration: time.Minute}}
			p.Spec.Cluster.Version = "v1.31.3"
			p.Spec.Backend.Local = &kobev1.LocalBackendSpec{Scheduling: true}
		}), Backend: Capabilities{KubernetesVersions: []string{"1.37.2"}}},
		want: want{next: 0, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"FieldNotImplemented": "True/FieldNotImplemented", "Capacity": "False/VersionUnavailable"},
			msgContains: map[string]string{"FieldNotImplemented": `set but not acted on: snapshot (members are not restored from Velero backups); backend.local.scheduling`}},
	}, {
		name: "warm.running where members cannot be frozen says why",
		in: Input{Pool: testPool(size(0), func(p *kobev1.ClusterPool) { p.Spec.Warm = &kobev1.WarmSpec{Running: ptr.To[int32](1)} }),
			Backend: Capabilities{FreezingRefusal: "the operator is not root"}},
		want: want{phase: kobev1.PoolHealthy, conds: map[string]string{"FieldNotImplemented": "True/FieldNotImplemented"},
			msgContains: map[string]string{"FieldNotImplemented": "warm.running (every warm member runs: the operator is not root)"}},
	}, {
		name: "warm.running where members are frozen is implemented",
		in: Input{Pool: testPool(size(0), func(p *kobev1.ClusterPool) { p.Spec.Warm = &kobev1.WarmSpec{Running: ptr.To[int32](1)} }),
			Backend: Capabilities{Freezing: true}},
		want: want{phase: kobev1.PoolHealthy, conds: map[string]string{"FieldNotImplemented": "False/AllImplemented"}},
	}, {
		name: "cluster.version matching the local backend is implemented",
		in: Input{Pool: testPool(size(0), func(p *kobev1.ClusterPool) { p.Spec.Cluster.Version = "v1.37.2" }),
			Backend: Capabilities{KubernetesVersions: []string{"1.37.2"}, Scheduling: true}},
		want: want{phase: kobev1.PoolHealthy, conds: map[string]string{"FieldNotImplemented": "False/AllImplemented"}},
	}, {
		name: "a backend of several versions names them all; servers beyond its limit are named",
		in: Input{Pool: testPool(size(0), func(p *kobev1.ClusterPool) {
			p.Spec.Cluster.Version = "1.36.0"
			p.Spec.Cluster.Servers = ptr.To[int32](3)
		}), Backend: Capabilities{KubernetesVersions: []string{"1.37.2", "1.38.0"}, MaxServers: 1}},
		want: want{phase: kobev1.PoolDegraded, conds: map[string]string{"FieldNotImplemented": "True/FieldNotImplemented", "Capacity": "False/VersionUnavailable"},
			msgContains: map[string]string{"FieldNotImplemented": `set but not acted on: cluster.servers 3 (the local backend runs 1 server per member)`,
				"Capacity": `cluster.version "1.36.0" is not a Kubernetes version the local backend of this operator builds (it has 1.37.2, 1.38.0): the pool builds and hands out no member`}},
	}, {
		name: "a version the backend cannot build: no member is built, not even of another version; Ready ones are kept but not handed out",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Spec.Cluster.Version = "1.36.0" }),
			Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady)},
			Backend: Capabilities{KubernetesVersions: []string{"1.37.2"}}},
		want: want{next: 1, counters: Counters{Ready: 1}, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Capacity": "False/VersionUnavailable"}},
	}, {
		name: "a version the backend lists among several is implemented",
		in: Input{Pool: testPool(size(0), func(p *kobev1.ClusterPool) { p.Spec.Cluster.Version = "v1.38.0" }),
			Backend: Capabilities{KubernetesVersions: []string{"1.37.2", "1.38.0"}}},
		want: want{phase: kobev1.PoolHealthy, conds: map[string]string{"FieldNotImplemented": "False/AllImplemented"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkPlan(t, decide(tc.in), tc.want) })
	}
}

func netpol(status metav1.ConditionStatus, reason string, required bool) *NetworkPolicyCheck {
	return &NetworkPolicyCheck{Required: required, Condition: metav1.Condition{
		Type: kobev1.ConditionNetworkPolicyEnforced, Status: status, Reason: reason, Message: "verdict",
	}}
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNewMember(t *testing.T) {
	p := testPool(func(p *kobev1.ClusterPool) { p.Spec.Cluster.Version = "1.37.2" })
	m := NewMember(p, 4, TemplateHash(&p.Spec))
	if m.Name != "pool-ci-4" || m.Namespace != "ns" || m.Labels[kobev1.LabelPool] != "ci" {
		t.Fatalf("name/labels: %s/%s %v", m.Namespace, m.Name, m.Labels)
	}
	ref := metav1.GetControllerOf(m)
	if ref == nil || ref.UID != p.UID || ref.Kind != "ClusterPool" {
		t.Fatalf("controller ref = %+v", ref)
	}
	if m.Spec.PoolRef.UID != p.UID || m.Spec.Ordinal != 4 || m.Spec.Cluster.Version != "1.37.2" || m.Spec.TemplateHash != TemplateHash(&p.Spec) {
		t.Fatalf("spec = %+v", m.Spec)
	}
	if TemplateHash(&p.Spec) == TemplateHash(&testPool().Spec) {
		t.Fatal("template hash ignores cluster.version")
	}
	if len(m.Finalizers) != 1 || m.Finalizers[0] != kobev1.FinalizerInstance {
		t.Fatalf("finalizers = %v", m.Finalizers)
	}
}

// TestTemplateHash pins hashes computed before bootstraps and snapshot were
// hashed: a pool without them must keep its hash, or upgrading the operator
// would roll out every member of every pool.
func TestTemplateHash(t *testing.T) {
	pinned := []struct {
		name string
		spec kobev1.ClusterPoolSpec
		hash string
	}{
		{"local, size 2", kobev1.ClusterPoolSpec{Size: ptr.To[int32](2), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}, "d4660e896b3bb864"},
		{"local with nodes and a version", kobev1.ClusterPoolSpec{
			Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal, Local: &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}},
			Cluster: kobev1.ClusterTemplate{Version: "v1.37.2"}}, "f057d3ea4156bb55"},
		{"kubernetes, empty bootstraps", kobev1.ClusterPoolSpec{Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes}, Bootstraps: []kobev1.BootstrapRef{}}, "36fef408254d268b"},
	}
	for _, tc := range pinned {
		if got := TemplateHash(&tc.spec); got != tc.hash {
			t.Errorf("%s: TemplateHash = %s, want %s (the hash of a pool without bootstraps or snapshot changed)", tc.name, got, tc.hash)
		}
	}

	base := testPool().Spec
	withBootstraps := *base.DeepCopy()
	withBootstraps.Bootstraps = []kobev1.BootstrapRef{{Name: "flux"}}
	otherBootstraps := *base.DeepCopy()
	otherBootstraps.Bootstraps = []kobev1.BootstrapRef{{Name: "argo"}}
	withSnapshot := *base.DeepCopy()
	withSnapshot.Snapshot = &kobev1.SnapshotSpec{Velero: kobev1.VeleroSnapshot{BackupName: "golden"}}
	otherSnapshot := *base.DeepCopy()
	otherSnapshot.Snapshot = &kobev1.SnapshotSpec{Velero: kobev1.VeleroSnapshot{BackupName: "golden-2"}}
	withParams := *base.DeepCopy()
	withParams.Bootstraps = []kobev1.BootstrapRef{{Name: "flux", Parameters: map[string]string{"branch": "main"}}}
	otherParams := *base.DeepCopy()
	otherParams.Bootstraps = []kobev1.BootstrapRef{{Name: "flux", Parameters: map[string]string{"branch": "dev"}}}
	seen := map[string]string{}
	for name, spec := range map[string]*kobev1.ClusterPoolSpec{"base": &base, "bootstraps flux": &withBootstraps,
		"bootstraps argo": &otherBootstraps, "snapshot golden": &withSnapshot, "snapshot golden-2": &otherSnapshot,
		"flux branch main": &withParams, "flux branch dev": &otherParams} {
		h := TemplateHash(spec)
		if other, ok := seen[h]; ok {
			t.Errorf("%s and %s hash alike (%s): the hash ignores what differs", name, other, h)
		}
		seen[h] = name
	}

	// A bundle's content is part of the template; a bundle the pool does
	// not name, or one that does not exist, is not.
	flux := &kobev1.BootstrapConfig{Spec: kobev1.BootstrapConfigSpec{Manifests: []kobev1.BootstrapManifest{{Name: "a", Content: "kind: A"}}}}
	flux2 := flux.DeepCopy()
	flux2.Spec.Manifests[0].Content = "kind: B"
	if BundleDigest(flux) == BundleDigest(flux2) {
		t.Error("two contents of a bundle have one digest")
	}
	refsOnly := TemplateHash(&withBootstraps)
	v1 := TemplateHashWith(&withBootstraps, map[string]string{"flux": BundleDigest(flux)})
	v2 := TemplateHashWith(&withBootstraps, map[string]string{"flux": BundleDigest(flux2)})
	if v1 == v2 || v1 == refsOnly {
		t.Errorf("hashes with content v1 %s, v2 %s, without %s: a content change must change the template", v1, v2, refsOnly)
	}
	if got := TemplateHashWith(&withBootstraps, map[string]string{"argo": BundleDigest(flux)}); got != refsOnly {
		t.Errorf("a bundle the pool does not name changed its hash: %s, want %s", got, refsOnly)
	}
	if got := TemplateHashWith(&base, map[string]string{"flux": BundleDigest(flux)}); got != TemplateHash(&base) {
		t.Error("a pool without bootstraps changed its hash with bundles given")
	}
	// The plan carries it, and members built with it are current.
	p := testPool(func(p *kobev1.ClusterPool) { p.Spec.Bootstraps = []kobev1.BootstrapRef{{Name: "flux"}} })
	in := Input{Pool: p, Bundles: map[string]string{"flux": BundleDigest(flux2)}, Members: []kobev1.ClusterInstance{
		*NewMember(p, 0, v1), *NewMember(p, 1, v2)}}
	in.Members[0].Status.Phase, in.Members[1].Status.Phase = kobev1.InstanceReady, kobev1.InstanceReady
	plan := decide(in)
	if plan.TemplateHash != v2 || plan.Outdated != 1 {
		t.Errorf("plan template %s outdated %d, want %s and 1 (the member built before the bundle changed)", plan.TemplateHash, plan.Outdated, v2)
	}
}

// The status written with a plan (before its creates) counts them as
// Creating; Counters stay what the members listed show.
func TestStatusCountersCountTheCreates(t *testing.T) {
	plan := decide(Input{Pool: testPool(), Members: []kobev1.ClusterInstance{member(0, kobev1.InstanceReady)}})
	if len(plan.Create) != 1 {
		t.Fatalf("Create = %v, want one member", plan.Create)
	}
	if want := (Counters{Ready: 1}); plan.Counters != want {
		t.Errorf("Counters = %+v, want %+v", plan.Counters, want)
	}
	if want := (Counters{Ready: 1, Creating: 1}); plan.StatusCounters() != want {
		t.Errorf("StatusCounters = %+v, want %+v", plan.StatusCounters(), want)
	}
}
