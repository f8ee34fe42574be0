//go:build integration

package clusterinstance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Fence implements backend.Fencer: the member stops answering, so Observe
// reports it Failed from then on, as the local backend's does.
func (f *fakeBackend) Fence(_ context.Context, m backend.Member) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := key(m)
	f.calls[k] = append(f.calls[k], "fence")
	if n := countOf(f.calls[k], "fence"); n <= f.plan(k).fenceFails {
		return fmt.Errorf("fake fence %d refused", n)
	}
	if _, ok := f.fencedAt[k]; !ok {
		f.fencedAt[k] = time.Now()
	}
	if _, ok := f.state[k]; ok {
		f.state[k] = backend.StateFailed
	}
	return nil
}

func countOf(calls []string, what string) int {
	n := 0
	for _, c := range calls {
		if c == what {
			n++
		}
	}
	return n
}

// callsOf is what the controller asked of the backend about member k, in order.
func (f *fakeBackend) callsOf(k string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls[k])
}

func (f *fakeBackend) firstFence(k string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.fencedAt[k]
	return at, ok
}

// TestBoundMembersAreFencedFirst: every teardown of a member that was bound
// starts by fencing it (the backend stops its API server, which is what
// ends the lease's certificate and the tokens minted inside), whoever
// starts the teardown and whenever an operator took over; a release is
// fenced within a second of the lease's write. A member never bound is
// not fenced.
func TestBoundMembersAreFencedFirst(t *testing.T) {
	h := startHarness(t)

	t.Run("a released member is fenced before anything else, within a second of the release", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		k := ns + "/" + m.Name
		// Kept a while after the fence, to read its condition.
		h.fake.set(k, memberPlan{slowDeletes: 10})
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		l := h.bind(t, m, "released")
		h.waitPhase(t, m, kobev1.InstanceLeased, 10*time.Second)

		l.Status.Phase = kobev1.LeaseReleased
		if err := h.c.Status().Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		testenv.Eventually(t, 10*time.Second, m.Name+" fenced", func() error {
			_, ok := h.fake.firstFence(k)
			return holds(ok, fmt.Sprintf("calls %v", h.fake.callsOf(k)))
		})
		at, _ := h.fake.firstFence(k)
		took := at.Sub(released)
		t.Logf("member fenced %s after the lease was released", took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("fenced %s after the release, want within 1s (the lease's credentials must die within 2s)", took)
		}
		testenv.Eventually(t, 10*time.Second, "Fenced condition on "+m.Name, func() error {
			got, ok := h.get(t, m)
			if !ok {
				return errors.New("gone before its condition was seen")
			}
			c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionFenced)
			return holds(c != nil && c.Status == "True" && c.Reason == kobev1.ReasonFenced, fmt.Sprintf("%+v", c))
		})
		h.waitGone(t, m, 15*time.Second)
		if calls := h.fake.callsOf(k); len(calls) == 0 || calls[0] != "fence" || countOf(calls, "fence") != 1 {
			t.Errorf("backend calls %v, want one fence, before any delete", calls)
		}
	})

	t.Run("a bound member deleted by hand is fenced before each Delete until a fence holds", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		k := ns + "/" + m.Name
		h.fake.set(k, memberPlan{fenceFails: 1, slowDeletes: 2})
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		h.bind(t, m, "held")
		h.waitPhase(t, m, kobev1.InstanceLeased, 10*time.Second)

		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
		calls := h.fake.callsOf(k)
		if len(calls) < 4 || calls[0] != "fence" || calls[1] != "delete" || calls[2] != "fence" {
			t.Errorf("backend calls %v, want fence (refused), delete, fence, delete...", calls)
		}
		if n := countOf(calls, "fence"); n != 2 {
			t.Errorf("%d fences in %v, want 2: none once one held", n, calls)
		}
		h.waitEvent(t, ns, m.Name, kobev1.ReasonFenceFailed)
	})

	t.Run("a bound member left Recycling and unfenced by an earlier operator is fenced before it is deleted", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		k := ns + "/" + m.Name
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		h.bind(t, m, "held")
		h.waitPhase(t, m, kobev1.InstanceLeased, 10*time.Second)

		// What an operator that stopped right after the move, before any
		// fence, leaves behind.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, _ := h.get(t, m)
			cur.Status.Phase = kobev1.InstanceRecycling
			return h.c.Status().Update(t.Context(), cur)
		})
		if err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
		if calls := h.fake.callsOf(k); len(calls) == 0 || calls[0] != "fence" {
			t.Errorf("backend calls %v, want a fence first", calls)
		}
	})

	t.Run("a member never bound is destroyed without a fence", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		k := ns + "/" + m.Name
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
		if calls := h.fake.callsOf(k); slices.Contains(calls, "fence") {
			t.Errorf("backend calls %v, want no fence", calls)
		}
	})
}
