//go:build integration

package clusterinstance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// hostFake is the fake backend tied to one host, as the local backend is.
type hostFake struct {
	*fakeBackend
	host string
}

func (h hostFake) Host() string { return h.host }

const (
	thisHost  = "runner-a/11111111-2222-3333-4444-555555555555"
	otherHost = "runner-b/99999999-8888-7777-6666-555555555555"
)

// TestMemberOnAnotherHost: a member of a host-bound backend
// records the host it is started on before anything is started. A member
// recorded on another host is never passed to the backend (not observed,
// not destroyed, never reported Destroyed), says why in a condition and
// an Event, is recycled unless a lease holds it, and keeps its finalizer
// until a person removes it.
func TestMemberOnAnotherHost(t *testing.T) {
	h := startHarnessWith(t, func(f *fakeBackend) backend.Backend { return hostFake{fakeBackend: f, host: thisHost} })

	t.Run("a new member records this host before it is created", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		got := h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		if got.Annotations[kobev1.AnnotationHost] != thisHost {
			t.Errorf("host record = %q, want %q", got.Annotations[kobev1.AnnotationHost], thisHost)
		}
		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
		if n := h.fake.count(h.fake.deletes, ns+"/"+m.Name); n == 0 {
			t.Error("the member went without a backend Delete")
		}
	})

	t.Run("a member recorded elsewhere is recycled, never destroyed here", func(t *testing.T) {
		ns := h.namespace(t)
		p, _ := h.poolAndMember(t, ns, nil)
		m := pool.NewMember(p, 7, pool.TemplateHash(&p.Spec))
		m.Finalizers = nil
		m.Annotations = map[string]string{kobev1.AnnotationHost: otherHost}
		if err := h.c.Create(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		key := ns + "/" + m.Name
		got := h.waitPhase(t, m, kobev1.InstanceRecycling, 15*time.Second)
		c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionProvisioned)
		if c == nil || c.Reason != kobev1.ReasonHostMismatch || !strings.Contains(c.Message, otherHost) || !strings.Contains(c.Message, thisHost) {
			t.Errorf("Provisioned = %+v, want HostMismatch naming both hosts", c)
		}
		h.waitEvent(t, ns, m.Name, kobev1.ReasonHostMismatch)
		h.requireHeldNotDestroyed(t, m)
		if n := h.fake.count(h.fake.creates, key); n != 0 {
			t.Errorf("backend Create called %d times for a member recorded on another host", n)
		}
		// A person who made sure it is gone there lets it go.
		cur, _ := h.get(t, m)
		cur.Finalizers = nil
		if err := h.c.Update(t.Context(), cur); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 10*time.Second)
	})

	t.Run("a leased member recorded elsewhere is left to its holder, unobserved, and recycled when its lease ends", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) {
			p.Spec.HealthCheck = &kobev1.HealthCheckSpec{IntervalSeconds: 1, FailureThreshold: 1}
		})
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		l := h.bind(t, m, "held")
		h.waitPhase(t, m, kobev1.InstanceLeased, 10*time.Second)
		// The operator moved: the member now looks recorded elsewhere, and
		// this host's backend knows nothing of it (Absent). It must not be
		// taken for lost.
		cur, _ := h.get(t, m)
		cur.Annotations[kobev1.AnnotationHost] = otherHost
		if err := h.c.Update(t.Context(), cur); err != nil {
			t.Fatal(err)
		}
		h.fake.forget(ns + "/" + m.Name)
		h.waitEvent(t, ns, m.Name, kobev1.ReasonHostMismatch)
		// Three health intervals: a wrong InstanceLost would show.
		testenv.Consistently(t, 3*time.Second, "a leased member on another host to stay Leased", func() error {
			got, _ := h.get(t, m)
			return holds(got != nil && got.Status.Phase == kobev1.InstanceLeased && !h.hasEvent(t, ns, m.Name, kobev1.ReasonInstanceLost),
				fmt.Sprintf("a leased member on another host was taken for lost: %+v", got))
		})

		l.Status.Phase = kobev1.LeaseReleased
		if err := h.c.Status().Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		h.waitPhase(t, m, kobev1.InstanceRecycling, 10*time.Second)
		h.requireHeldNotDestroyed(t, m)
		cur, _ = h.get(t, m)
		cur.Finalizers = nil
		if err := h.c.Update(t.Context(), cur); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 10*time.Second)
	})
}

// requireHeldNotDestroyed waits until m is deleted and held by its
// finalizer, watches it for several poll intervals, and fails if the
// backend was asked to destroy or fence it, or it was let go.
func (h *harness) requireHeldNotDestroyed(t *testing.T, m *kobev1.ClusterInstance) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, m.Name+" deleted and held", func() error {
		cur, ok := h.get(t, m)
		return holds(ok && cur.DeletionTimestamp != nil && len(cur.Finalizers) == 1, fmt.Sprintf("present %v", ok))
	})
	// A window in which a wrong destroy would happen: ten poll intervals.
	key := m.Namespace + "/" + m.Name
	testenv.Consistently(t, 2*time.Second, "the member recorded elsewhere to stay held, untouched", func() error {
		if cur, ok := h.get(t, m); !ok || len(cur.Finalizers) != 1 {
			return fmt.Errorf("the member recorded elsewhere was let go: present %v", ok)
		}
		if n := h.fake.count(h.fake.deletes, key); n != 0 {
			return fmt.Errorf("backend Delete called %d times for a member on another host", n)
		}
		if calls := h.fake.callsOf(key); slices.Contains(calls, "fence") {
			return fmt.Errorf("backend calls %v for a member on another host, want no fence", calls)
		}
		return nil
	})
}
