//go:build integration

package clusterinstance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// freezerFake is the fake backend with a freezer: a member's frozen state
// is a flag; a frozen member still "is" the test API server, so the probe
// after a thaw passes unless Thaw is told to fail.
type freezerFake struct {
	*fakeBackend
	fz *freezeState
}

type freezeState struct {
	mu        sync.Mutex
	refusal   string // CanFreeze's why; "" when it can
	frozen    map[string]bool
	thawFails int // Thaw fails this many more times
	thaws     int
	// onFreeze, when set, is called by Freeze before it freezes.
	onFreeze func(m backend.Member)
}

func (f freezerFake) CanFreeze() (bool, string) {
	f.fz.mu.Lock()
	defer f.fz.mu.Unlock()
	return f.fz.refusal == "", f.fz.refusal
}

func (f freezerFake) Freeze(_ context.Context, m backend.Member) error {
	f.fz.mu.Lock()
	hook := f.fz.onFreeze
	f.fz.mu.Unlock()
	if hook != nil {
		hook(m)
	}
	f.fz.mu.Lock()
	defer f.fz.mu.Unlock()
	f.fz.frozen[key(m)] = true
	return nil
}

func (f freezerFake) Thaw(_ context.Context, m backend.Member) error {
	f.fz.mu.Lock()
	defer f.fz.mu.Unlock()
	f.fz.thaws++
	if f.fz.thawFails > 0 {
		f.fz.thawFails--
		return errors.New("fake thaw failure")
	}
	f.fz.frozen[key(m)] = false
	return nil
}

func (f freezerFake) Frozen(m backend.Member) (bool, error) {
	f.fz.mu.Lock()
	defer f.fz.mu.Unlock()
	return f.fz.frozen[key(m)], nil
}

func (fz *freezeState) isFrozen(k string) bool {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	return fz.frozen[k]
}

func (fz *freezeState) set(f func(*freezeState)) {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	f(fz)
}

// TestFreezeAndThaw: the instance controller freezes a Ready member its
// pool asked to freeze (spec.frozen) only after the Frozen condition is
// written, so that no binder can take it meanwhile; it thaws and probes it
// when asked, and it is bindable again only once the probe passed; a
// frozen member that dies is recycled; a bound member found frozen is
// thawed; a backend that cannot freeze is left alone.
func TestFreezeAndThaw(t *testing.T) {
	fz := &freezeState{frozen: map[string]bool{}}
	h := startHarnessWith(t, func(f *fakeBackend) backend.Backend { return freezerFake{fakeBackend: f, fz: fz} })
	fastHealth := func(p *kobev1.ClusterPool) {
		p.Spec.HealthCheck = &kobev1.HealthCheckSpec{IntervalSeconds: 1, FailureThreshold: 3}
	}
	setFrozen := func(t *testing.T, m *kobev1.ClusterInstance, frozen bool) {
		t.Helper()
		for {
			cur, _ := h.get(t, m)
			cur.Spec.Frozen = frozen
			if err := h.c.Update(t.Context(), cur); err == nil {
				return
			} else if !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
	}
	frozenCond := func(m *kobev1.ClusterInstance) *metav1.Condition {
		return meta.FindStatusCondition(m.Status.Conditions, kobev1.ConditionFrozen)
	}
	waitFrozenCond := func(t *testing.T, m *kobev1.ClusterInstance, status metav1.ConditionStatus, reason string) *kobev1.ClusterInstance {
		t.Helper()
		var got *kobev1.ClusterInstance
		testenv.Eventually(t, 15*time.Second, fmt.Sprintf("%s Frozen %s/%s", m.Name, status, reason), func() error {
			got, _ = h.get(t, m)
			c := frozenCond(got)
			return holds(c != nil && c.Status == status && c.Reason == reason, fmt.Sprintf("Frozen %+v", c))
		})
		return got
	}

	t.Run("frozen only after the condition is written; bindable again only after a thaw and a probe", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, fastHealth)
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		k := ns + "/" + m.Name
		var condAtFreeze *metav1.Condition
		var seen bool
		fz.set(func(fz *freezeState) {
			fz.onFreeze = func(bm backend.Member) {
				first := false
				fz.set(func(*freezeState) { first, seen = bm.Name == m.Name && !seen, seen || bm.Name == m.Name })
				if !first {
					return // the first Freeze only
				}
				cur := &kobev1.ClusterInstance{}
				if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: bm.Namespace, Name: bm.Name}, cur); err == nil {
					fz.set(func(*freezeState) { condAtFreeze = frozenCond(cur) })
				}
			}
		})
		setFrozen(t, m, true)
		got := waitFrozenCond(t, m, metav1.ConditionTrue, kobev1.ReasonFrozen)
		testenv.Eventually(t, 10*time.Second, "the backend froze it", func() error { return holds(fz.isFrozen(k), "") })
		fz.set(func(fz *freezeState) {
			fz.onFreeze = nil
			if condAtFreeze == nil || condAtFreeze.Status != metav1.ConditionTrue {
				t.Errorf("when Freeze was called the API held Frozen %+v: it must be True (written, fenced) before the processes stop", condAtFreeze)
			}
		})
		if lease.Bindable(got) {
			t.Error("a frozen member is bindable")
		}

		// The thaw fails twice: the member stays unbindable (Thawing)
		// until a thaw and a probe pass.
		fz.set(func(fz *freezeState) { fz.thawFails, fz.thaws = 2, 0 })
		setFrozen(t, m, false)
		got = waitFrozenCond(t, m, metav1.ConditionFalse, kobev1.ReasonThawed)
		if fz.isFrozen(k) || !lease.Bindable(got) || !meta.IsStatusConditionTrue(got.Status.Conditions, kobev1.ConditionHealthy) {
			t.Errorf("after the thaw: backend frozen %v, bindable %v, conditions %v", fz.isFrozen(k), lease.Bindable(got), got.Status.Conditions)
		}
		fz.set(func(fz *freezeState) {
			if fz.thaws < 3 {
				t.Errorf("Thaw called %d times: the two failures must be retried", fz.thaws)
			}
		})
	})

	t.Run("a frozen member whose processes died is recycled", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, fastHealth)
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		setFrozen(t, m, true)
		waitFrozenCond(t, m, metav1.ConditionTrue, kobev1.ReasonFrozen)
		h.fake.setState(ns+"/"+m.Name, backend.StateFailed)
		h.waitGone(t, m, 30*time.Second)
		if !h.hasEvent(t, ns, m.Name, kobev1.ReasonUnhealthy) {
			t.Error("no Unhealthy event for the frozen member that died")
		}
	})

	t.Run("a bound member found frozen is thawed", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		k := ns + "/" + m.Name
		// A replica that lost its leadership finished a Freeze after the
		// member was thawed and bound.
		fz.set(func(fz *freezeState) { fz.frozen[k] = true })
		h.bind(t, m, "holder")
		h.waitPhase(t, m, kobev1.InstanceLeased, 15*time.Second)
		testenv.Eventually(t, 10*time.Second, "the bound member thawed", func() error { return holds(!fz.isFrozen(k), "") })
	})

	t.Run("a backend that cannot freeze here freezes nothing", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, fastHealth)
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		fz.set(func(fz *freezeState) { fz.refusal = "the operator is not root" })
		defer fz.set(func(fz *freezeState) { fz.refusal = "" })
		setFrozen(t, m, true)
		// Two health intervals: time enough for a freeze, had there been one.
		time.Sleep(2 * time.Second)
		got, _ := h.get(t, m)
		if c := frozenCond(got); c != nil || fz.isFrozen(ns+"/"+m.Name) {
			t.Errorf("Frozen condition %+v, backend frozen %v: nothing may be frozen", c, fz.isFrozen(ns+"/"+m.Name))
		}
		if lease.Bindable(got) {
			t.Error("a member the pool asked to freeze is bindable")
		}
	})
}
