package pool

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func TestPlanFreeze(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Minute)
	warm := func(name string) FreezeCandidate {
		return FreezeCandidate{Name: name, Ready: true, RunningSince: old}
	}
	frozen := func(name string) FreezeCandidate {
		c := warm(name)
		c.Frozen = true
		return c
	}
	young := func(name string, ago time.Duration) FreezeCandidate {
		c := warm(name)
		c.RunningSince = now.Add(-ago)
		return c
	}
	leased := func(c FreezeCandidate) FreezeCandidate { c.Leased = true; return c }
	notReady := func(c FreezeCandidate) FreezeCandidate { c.Ready = false; return c }

	for _, tc := range []struct {
		name    string
		in      FreezeInput
		freeze  []string
		thaw    []string
		requeue time.Duration
	}{
		{name: "no members", in: FreezeInput{Running: 1}},
		{name: "one warm member runs", in: FreezeInput{Running: 1, Members: []FreezeCandidate{warm("a")}}},
		{name: "beyond running the last are frozen", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{warm("a"), warm("b"), warm("c")}}, freeze: []string{"b", "c"}},
		{name: "negative running means the default of one", in: FreezeInput{Running: -1,
			Members: []FreezeCandidate{warm("a"), warm("b")}}, freeze: []string{"b"}},
		{name: "running zero freezes every warm member", in: FreezeInput{Running: 0,
			Members: []FreezeCandidate{warm("a"), warm("b")}}, freeze: []string{"a", "b"}},
		{name: "running larger than the pool freezes nothing", in: FreezeInput{Running: 5,
			Members: []FreezeCandidate{warm("a"), warm("b")}}},
		{name: "steady state: nothing to do", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{warm("a"), frozen("b"), frozen("c")}}},
		{name: "the running one was leased: the first frozen is thawed ahead of demand", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{leased(warm("a")), frozen("b"), frozen("c")}}, thaw: []string{"b"}},
		{name: "waiting requests thaw as many more", in: FreezeInput{Running: 1, Waiting: 2,
			Members: []FreezeCandidate{warm("a"), frozen("b"), frozen("c"), frozen("d")}}, thaw: []string{"b", "c"}},
		{name: "more waiting than members thaws them all", in: FreezeInput{Running: 1, Waiting: 9,
			Members: []FreezeCandidate{frozen("a"), frozen("b")}}, thaw: []string{"a", "b"}},
		{name: "running members are kept rather than swapped for earlier frozen ones", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{frozen("a"), warm("b")}}},
		{name: "a member that has not settled is frozen later", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{warm("a"), young("b", 4*time.Second)}}, requeue: 6 * time.Second},
		{name: "an earlier member is not frozen in place of a young one", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{warm("a"), warm("b"), young("c", 7*time.Second)}}, freeze: []string{"b"}, requeue: 3 * time.Second},
		{name: "settle is configurable", in: FreezeInput{Running: 1, Settle: 2 * time.Second,
			Members: []FreezeCandidate{warm("a"), young("b", 3*time.Second)}}, freeze: []string{"b"}},
		{name: "exactly settled is frozen", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{warm("a"), young("b", DefaultFreezeSettle)}}, freeze: []string{"b"}},
		{name: "leased members are never frozen and do not count as running", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{leased(warm("a")), leased(warm("b")), warm("c"), warm("d")}}, freeze: []string{"d"}},
		{name: "a frozen leased member is thawed", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{leased(frozen("a")), warm("b")}}, thaw: []string{"a"}},
		{name: "a frozen member that is no longer Ready is thawed to be checked or destroyed", in: FreezeInput{Running: 1,
			Members: []FreezeCandidate{warm("a"), notReady(frozen("b"))}}, thaw: []string{"b"}},
		{name: "members not Ready are never frozen", in: FreezeInput{Running: 0,
			Members: []FreezeCandidate{notReady(warm("a"))}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = now
			got := PlanFreeze(tc.in)
			if !slices.Equal(got.Freeze, tc.freeze) || !slices.Equal(got.Thaw, tc.thaw) || got.RequeueAfter != tc.requeue {
				t.Errorf("PlanFreeze = freeze %v thaw %v requeue %s; want freeze %v thaw %v requeue %s",
					got.Freeze, got.Thaw, got.RequeueAfter, tc.freeze, tc.thaw, tc.requeue)
			}
		})
	}
}

func TestFreezeCandidates(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	member := func(name string, ordinal int32, hash string, mutate ...func(*kobev1.ClusterInstance)) kobev1.ClusterInstance {
		m := kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   kobev1.ClusterInstanceSpec{Ordinal: ordinal, TemplateHash: hash},
			Status: kobev1.ClusterInstanceStatus{Phase: kobev1.InstanceReady, LastPhaseChange: &metav1.Time{Time: t0}}}
		for _, f := range mutate {
			f(&m)
		}
		return m
	}
	thawedAt := func(at time.Time) func(*kobev1.ClusterInstance) {
		return func(m *kobev1.ClusterInstance) {
			m.Status.Conditions = []metav1.Condition{{Type: kobev1.ConditionFrozen, Status: metav1.ConditionFalse,
				Reason: kobev1.ReasonThawed, LastTransitionTime: metav1.Time{Time: at}}}
		}
	}
	frozenAt := func(at time.Time) func(*kobev1.ClusterInstance) {
		return func(m *kobev1.ClusterInstance) {
			m.Spec.Frozen = true
			m.Status.Conditions = []metav1.Condition{{Type: kobev1.ConditionFrozen, Status: metav1.ConditionTrue,
				Reason: kobev1.ReasonFrozen, LastTransitionTime: metav1.Time{Time: at}}}
		}
	}
	deleting := func(m *kobev1.ClusterInstance) { m.DeletionTimestamp = &metav1.Time{Time: t0} }
	leased := func(m *kobev1.ClusterInstance) {
		m.Spec.LeaseRef = &kobev1.LeaseBinding{Name: "l"}
		m.Status.Phase = kobev1.InstanceLeased
	}

	got := FreezeCandidates([]kobev1.ClusterInstance{
		member("old-1", 1, "old"),
		member("cur-5", 5, "cur", frozenAt(t0.Add(time.Minute))),
		member("cur-3", 3, "cur", thawedAt(t0.Add(2*time.Minute))),
		member("cur-4", 4, "cur", deleting),
		member("cur-7", 7, "cur", leased),
		member("cur-2", 2, "cur", thawedAt(t0.Add(-time.Minute))),
	}, "cur")
	want := []FreezeCandidate{
		{Name: "cur-2", Ready: true, RunningSince: t0},
		{Name: "cur-3", Ready: true, RunningSince: t0.Add(2 * time.Minute)},
		{Name: "cur-5", Ready: true, Frozen: true, RunningSince: t0},
		{Name: "cur-7", Leased: true, RunningSince: t0},
		{Name: "old-1", Ready: true, RunningSince: t0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("FreezeCandidates =\n%+v\nwant (current template first, by ordinal; deleting left out; running since the later of Ready and thaw)\n%+v", got, want)
	}
	if got := FreezeCandidates([]kobev1.ClusterInstance{member("b", 2, "x"), member("a", 1, "y")}, ""); got[0].Name != "a" {
		t.Errorf("without a template hash the order is by ordinal alone: %+v", got)
	}
}

func TestWarmRunning(t *testing.T) {
	for _, tc := range []struct {
		spec kobev1.ClusterPoolSpec
		want int
	}{
		{kobev1.ClusterPoolSpec{}, -1},
		{kobev1.ClusterPoolSpec{Warm: &kobev1.WarmSpec{}}, -1},
		{kobev1.ClusterPoolSpec{Warm: &kobev1.WarmSpec{Running: ptr.To[int32](0)}}, 0},
		{kobev1.ClusterPoolSpec{Warm: &kobev1.WarmSpec{Running: ptr.To[int32](4)}}, 4},
	} {
		if got := WarmRunning(&tc.spec); got != tc.want {
			t.Errorf("WarmRunning(%+v) = %d, want %d", tc.spec.Warm, got, tc.want)
		}
	}
}
