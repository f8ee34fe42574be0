package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// failed records f consecutive failures, the last ago, of a member built
// from template hash ("" for testPool's).
func failed(f int32, ago time.Duration, hash string) func(*kobev1.ClusterPool) {
	return func(p *kobev1.ClusterPool) {
		if hash == "" {
			hash = TemplateHash(&testPool().Spec)
		}
		p.Status.Failures = f
		p.Status.LastFailure = &kobev1.MemberFailure{Member: "pool-ci-7", Reason: kobev1.ReasonProvisionFailed,
			Message: "etcd did not start", Time: metav1.NewTime(now.Add(-ago)), TemplateHash: hash}
	}
}

func TestBackoffAfter(t *testing.T) {
	for f, want := range map[int32]time.Duration{
		0: 0, 1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 6: 160 * time.Second,
		7: CreateBackoffMax, 8: CreateBackoffMax, 1000: CreateBackoffMax,
	} {
		if got := backoffAfter(f); got != want {
			t.Errorf("backoffAfter(%d) = %s, want %s", f, got, want)
		}
	}
}

// failedMember is member n moved from Creating to Recycling ago, for reason.
func failedMember(n int32, reason string, ago time.Duration) kobev1.ClusterInstance {
	return member(n, kobev1.InstanceRecycling, func(m *kobev1.ClusterInstance) {
		at := metav1.NewTime(now.Add(-ago))
		m.Status.LastPhaseChange = &at
		m.Status.Conditions = []metav1.Condition{{Type: kobev1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason}}
	})
}

func TestDecideBackoff(t *testing.T) {
	cases := []struct {
		name string
		in   Input
		want want
	}{{
		name: "in backoff: 3 failures wait 20s after the last, so no create for 10s more",
		in:   Input{Pool: testPool(failed(3, 10*time.Second, ""))},
		want: want{phase: kobev1.PoolDegraded, requeue: 10 * time.Second,
			conds: map[string]string{"Capacity": "False/CreateBackoff", "Provisioning": "False/CreateFailures", "Ready": "False/CreateBackoff"},
			msgContains: map[string]string{
				"Capacity":     "3 members failed to become Ready in a row, the last pool-ci-7 (ProvisionFailed: etcd did not start); the pool waits 20s after a failure before it creates the next member: 10s left",
				"Provisioning": "3 members failed to become Ready in a row, the last pool-ci-7 at 2026-07-01T11:59:50Z (ProvisionFailed: etcd did not start)",
			}},
	}, {
		name: "after the backoff: create again; still Degraded while failing and short",
		in:   Input{Pool: testPool(failed(3, 20*time.Second, ""))},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Capacity": "True/CapacityAvailable", "Provisioning": "False/CreateFailures", "Ready": "False/CreateFailures"}},
	}, {
		name: "a changed template ends the backoff: the failures were the old template's",
		in:   Input{Pool: testPool(failed(3, time.Second, "old"))},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Capacity": "True/CapacityAvailable", "Provisioning": "False/CreateFailures"}},
	}, {
		name: "the backoff is capped at 5m",
		in:   Input{Pool: testPool(failed(30, 4*time.Minute, ""))},
		want: want{phase: kobev1.PoolDegraded, requeue: time.Minute,
			conds:       map[string]string{"Capacity": "False/CreateBackoff"},
			msgContains: map[string]string{"Capacity": "waits 5m0s after a failure before it creates the next member: 1m0s left"}},
	}, {
		name: "failures without a recorded last failure do not back off",
		in: Input{Pool: testPool(func(p *kobev1.ClusterPool) { p.Status.Failures = 4 }),
			Members: readyMembers(0, 1)},
		want: want{next: 2, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy,
			conds: map[string]string{"Capacity": "True/CapacityAvailable", "Provisioning": "False/CreateFailures"}},
	}, {
		name: "a warm pool that wants nothing is not held back by a backoff",
		in:   Input{Pool: testPool(failed(2, time.Second, "")), Members: readyMembers(0, 1)},
		want: want{next: 2, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy,
			conds: map[string]string{"Capacity": "True/CapacityAvailable", "Provisioning": "False/CreateFailures", "Ready": "True/Warm"}},
	}, {
		name: "the backoff does not hold back the retirement of outdated members beyond the target",
		in: Input{Pool: testPool(newTemplate, size(1), failed(2, time.Second, TemplateHash(&testPool(newTemplate).Spec))),
			Members: append(readyMembers(0), member(1, kobev1.InstanceReady, builtFrom(testPool(newTemplate))))},
		want: want{delete: []string{"pool-ci-0:Outdated"}, next: 2, counters: Counters{Ready: 2}, phase: kobev1.PoolHealthy},
	}, {
		name: "churn: members reaped by creatingTimeout again and again",
		in: Input{Pool: testPool(failed(2, time.Minute, ""), func(p *kobev1.ClusterPool) {
			p.Status.CreatingTimeouts = 2
			p.Spec.CreatingTimeout = &metav1.Duration{Duration: 3 * time.Minute}
			p.Status.Demand = &kobev1.DemandStatus{ProvisionSeconds: 240}
		})},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Provisioning": "False/MembersChurn", "Ready": "False/MembersChurn"},
			msgContains: map[string]string{"Provisioning": "2 members in a row were reaped by creatingTimeout 3m0s before becoming Ready; raise creatingTimeout " +
				"(members of this pool take 240s to become Ready, the median of recent ones)"}},
	}, {
		name: "churn names the default creatingTimeout",
		in:   Input{Pool: testPool(failed(3, time.Minute, ""), func(p *kobev1.ClusterPool) { p.Status.CreatingTimeouts = 3 })},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolDegraded,
			conds:       map[string]string{"Provisioning": "False/MembersChurn"},
			msgContains: map[string]string{"Provisioning": "3 members in a row were reaped by creatingTimeout 10m0s before becoming Ready; raise creatingTimeout"}},
	}, {
		name: "one member reaped is a failure, not churn",
		in:   Input{Pool: testPool(failed(1, time.Minute, ""), func(p *kobev1.ClusterPool) { p.Status.CreatingTimeouts = 1 })},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Provisioning": "False/CreateFailures"}},
	}, {
		name: "a member failed after the pool's last counted failure: counted before the plan, creates wait the longer backoff",
		in:   Input{Pool: testPool(failed(1, 30*time.Second, "")), Members: []kobev1.ClusterInstance{failedMember(0, kobev1.ReasonProvisionFailed, 0)}},
		want: want{next: 1, counters: Counters{Recycling: 1}, phase: kobev1.PoolDegraded, requeue: 10 * time.Second,
			conds:       map[string]string{"Capacity": "False/CreateBackoff"},
			msgContains: map[string]string{"Capacity": "2 members failed to become Ready in a row, the last pool-ci-0"}},
	}, {
		name: "the first failure, counted before the plan: creates wait 5s",
		in:   Input{Pool: testPool(), Members: []kobev1.ClusterInstance{failedMember(0, kobev1.ReasonCreatingTimeout, 0)}},
		want: want{next: 1, counters: Counters{Recycling: 1}, phase: kobev1.PoolDegraded, requeue: 5 * time.Second,
			conds: map[string]string{"Capacity": "False/CreateBackoff"}},
	}, {
		name: "a failure counted before does not hold creates past its backoff",
		in: Input{Pool: testPool(failed(1, 30*time.Second, ""), func(p *kobev1.ClusterPool) { p.Status.CountedFailures = []string{"pool-ci-0"} }),
			Members: []kobev1.ClusterInstance{failedMember(0, kobev1.ReasonProvisionFailed, 30*time.Second)}},
		want: want{create: []int32{1, 2}, next: 3, counters: Counters{Recycling: 1}, phase: kobev1.PoolDegraded,
			conds: map[string]string{"Capacity": "True/CapacityAvailable"}},
	}, {
		name: "a member recycled for a reason that is no failure does not hold creates",
		in:   Input{Pool: testPool(), Members: []kobev1.ClusterInstance{failedMember(0, kobev1.ReasonUnhealthy, 0)}},
		want: want{create: []int32{1, 2}, next: 3, counters: Counters{Recycling: 1}, phase: kobev1.PoolFilling,
			conds: map[string]string{"Capacity": "True/CapacityAvailable"}},
	}, {
		name: "no failures: MembersSucceeding",
		in:   Input{Pool: testPool()},
		want: want{create: []int32{0, 1}, next: 2, phase: kobev1.PoolFilling,
			conds: map[string]string{"Provisioning": "True/MembersSucceeding"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// As the pool controller does: the streak first, then the plan.
			CountFailures(&tc.in.Pool.Status, tc.in.Members)
			checkPlan(t, decide(tc.in), tc.want)
		})
	}
}
