//go:build heavy

package clusterpool

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/gates"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// freezeSettle is the harness's FreezeSettle: long enough for a member's
// first checks, short enough for the tests.
const freezeSettle = 2 * time.Second

// TestWarmMembersFreeze runs real local members: a pool keeps warm.running
// of its warm members running and freezes the others (their API servers
// answer nothing); a bind thaws the next member, which is handed out only
// once its API server answers; a frozen member scaled away leaves nothing.
func TestWarmMembersFreeze(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("freezing members needs root (cgroups): run the heavy layer as root, as CI does")
	}
	h := startHarness(t)
	ns := h.namespace(t)
	p := h.createPool(t, ns, "frozen", func(p *kobev1.ClusterPool) {
		p.Spec.Size = ptr.To[int32](3)
		p.Spec.Warm = &kobev1.WarmSpec{Running: ptr.To[int32](1)}
	})
	h.waitPool(t, p, memberReady, "3 Ready", readyIs(3))

	// The first in ordinal order runs; the two others freeze once settled.
	var running, frozen []kobev1.ClusterInstance
	testenv.Eventually(t, shortWait, "one member running, two frozen", func() error {
		running, frozen = h.byFreeze(t, p)
		if len(running) != 1 || len(frozen) != 2 {
			return fmt.Errorf("running %s, frozen %s", summary(running), summary(frozen))
		}
		return nil
	})
	if running[0].Spec.Ordinal > frozen[0].Spec.Ordinal || running[0].Spec.Ordinal > frozen[1].Spec.Ordinal {
		t.Errorf("member %s runs, %s and %s are frozen: the lowest ordinal should run", running[0].Name, frozen[0].Name, frozen[1].Name)
	}
	for i := range frozen {
		if lease.Bindable(&frozen[i]) {
			t.Errorf("frozen member %s is bindable", frozen[i].Name)
		}
		if f, err := h.local.Frozen(backend.MemberOf(&frozen[i])); err != nil || !f {
			t.Errorf("member %s: Frozen condition True but the backend says frozen=%v (%v)", frozen[i].Name, f, err)
		}
		if err := gates.Probe(t.Context(), h.adminKubeconfig(t, &frozen[i]), time.Second); err == nil {
			t.Errorf("frozen member %s answered /readyz", frozen[i].Name)
		}
	}
	if err := gates.Probe(t.Context(), h.adminKubeconfig(t, &running[0]), 5*time.Second); err != nil {
		t.Errorf("running member %s: %v", running[0].Name, err)
	}

	// A bind takes the running member: the next is thawed ahead of the
	// next lease, and bindable only once its API server answered.
	l := h.bind(t, &running[0], "takes-the-running-one")
	var thawed kobev1.ClusterInstance
	testenv.Eventually(t, shortWait, "a frozen member thawed and checked", func() error {
		run, _ := h.byFreeze(t, p)
		for _, m := range run {
			if m.Name != running[0].Name && slices.ContainsFunc(frozen, func(f kobev1.ClusterInstance) bool { return f.Name == m.Name }) {
				thawed = m
				return nil
			}
		}
		return fmt.Errorf("running %s", summary(run))
	})
	c := meta.FindStatusCondition(thawed.Status.Conditions, kobev1.ConditionFrozen)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kobev1.ReasonThawed || !lease.Bindable(&thawed) {
		t.Errorf("thawed member %s: Frozen condition %+v, bindable %v", thawed.Name, c, lease.Bindable(&thawed))
	}
	if err := gates.Probe(t.Context(), h.adminKubeconfig(t, &thawed), 5*time.Second); err != nil {
		t.Errorf("thawed member %s: %v", thawed.Name, err)
	}
	if f, err := h.local.Frozen(backend.MemberOf(&thawed)); err != nil || f {
		t.Errorf("thawed member %s: backend says frozen=%v (%v)", thawed.Name, f, err)
	}

	// Destroying frozen members (the pool goes, after the lease) leaves no
	// process and no cgroup.
	if err := h.c.Delete(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	h.deletePoolAndWait(t, p)
	for _, m := range append(frozen, running...) {
		if f, err := h.local.Frozen(backend.MemberOf(&m)); err != nil || f {
			t.Errorf("destroyed member %s: frozen=%v (%v)", m.Name, f, err)
		}
	}
}

// byFreeze splits the pool's Ready, unbound members into those that run
// (lease.Running) and those frozen (Frozen condition True).
func (h *harness) byFreeze(t *testing.T, p *kobev1.ClusterPool) (running, frozen []kobev1.ClusterInstance) {
	for _, m := range h.members(t, p) {
		if m.Status.Phase != kobev1.InstanceReady || m.Spec.LeaseRef != nil || m.DeletionTimestamp != nil {
			continue
		}
		switch {
		case lease.Running(&m):
			running = append(running, m)
		case meta.IsStatusConditionTrue(m.Status.Conditions, kobev1.ConditionFrozen):
			frozen = append(frozen, m)
		}
	}
	return running, frozen
}
