//go:build heavy

package clusterpool

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// unbuildable stands for a wired backend of a type in a test that runs only
// the pool controller: the pool controller asks a backend nothing but its
// capabilities, and no instance controller runs to call the rest.
type unbuildable struct{ typ kobev1.BackendType }

func (u unbuildable) Type() kobev1.BackendType                   { return u.typ }
func (unbuildable) Capabilities() backend.Capabilities           { return backend.Capabilities{} }
func (unbuildable) Create(context.Context, backend.Member) error { return backend.ErrUnavailable }
func (unbuildable) Observe(context.Context, backend.Member) (backend.Observation, error) {
	return backend.Observation{State: backend.StateAbsent}, nil
}
func (unbuildable) Delete(context.Context, backend.Member) (bool, error) { return true, nil }

// TestHostCap runs the pool controller against a real API server with a cap
// of 3 local members: members of other namespaces and pools count, members
// of other backend types do not, two pools filling at once never overshoot
// the cap, the pool held back says so, and creation resumes as soon as a
// member goes away.
func TestHostCap(t *testing.T) {
	env := testenv.Shared(t)
	c := env.Client
	ctx := t.Context()
	nsStray, nsA, nsB := env.NewNamespace(t), env.NewNamespace(t), env.NewNamespace(t)
	// The host's members are those of the namespaces the manager watches:
	// the API server is shared with other tests.
	namespaces := []string{nsStray, nsA, nsB}
	mgr := env.NewManager(t, namespaces...)
	if err := index.Setup(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	const limit = 3
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName),
		Backends: backend.Registry{kobev1.BackendLocal: unbuildable{kobev1.BackendLocal}, kobev1.BackendKubernetes: unbuildable{kobev1.BackendKubernetes}},
		Clock:    clock.RealClock{}, MaxConcurrentReconciles: 4,
		HostCaps: map[kobev1.BackendType]HostCap{kobev1.BackendLocal: {Max: limit, Setting: "--local-max-members"}}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)

	// A local member of no pool (left by anything) and a kubernetes one.
	stray := func(ns, name string, typ kobev1.BackendType) *kobev1.ClusterInstance {
		m := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "elsewhere"}, Backend: kobev1.BackendSpec{Type: typ}}}
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	strayLocal := stray(nsStray, "stray-local", kobev1.BackendLocal)
	stray(nsStray, "stray-kubernetes", kobev1.BackendKubernetes)

	var pools []*kobev1.ClusterPool
	for _, ns := range []string{nsA, nsB} {
		p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
			Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](2), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, p)
	}
	// A kubernetes pool is not held back by the local cap.
	kp := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "k", Namespace: nsA},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](2), Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes}}}
	if err := c.Create(ctx, kp); err != nil {
		t.Fatal(err)
	}

	// members lists the members of the test's namespaces.
	members := func(opts ...client.ListOption) []kobev1.ClusterInstance {
		var out []kobev1.ClusterInstance
		for _, ns := range namespaces {
			var list kobev1.ClusterInstanceList
			if err := c.List(ctx, &list, append(opts, client.InNamespace(ns))...); err != nil {
				t.Fatal(err)
			}
			out = append(out, list.Items...)
		}
		return out
	}
	localCount := func() (int, []string) {
		var names []string
		for _, m := range members() {
			if m.Spec.Backend.Type == kobev1.BackendLocal {
				names = append(names, m.Namespace+"/"+m.Name)
			}
		}
		return len(names), names
	}
	capacity := func(p *kobev1.ClusterPool) *metav1.Condition {
		got := &kobev1.ClusterPool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionCapacity)
	}
	heldBack := func() (int, string) {
		n, msg := 0, ""
		for _, p := range pools {
			if cc := capacity(p); cc != nil && cc.Status == metav1.ConditionFalse && cc.Reason == kobev1.ReasonHostCapacityReached {
				n++
				msg = cc.Message
			}
		}
		return n, msg
	}
	// stable checks that the count stays at want for a while: a late
	// create beyond the cap would show within it.
	stable := func(want int) {
		t.Helper()
		testenv.Consistently(t, 3*time.Second, fmt.Sprintf("%d local members", want), func() error {
			if n, names := localCount(); n != want {
				return fmt.Errorf("%d local members, want %d: %v", n, want, names)
			}
			return nil
		})
	}

	testenv.Eventually(t, 30*time.Second, "both pools filled up to the cap and one says HostCapacityReached", func() error {
		n, names := localCount()
		held, _ := heldBack()
		if n != limit || held == 0 {
			return fmt.Errorf("%d local members %v, %d pools held back", n, names, held)
		}
		return nil
	})
	stable(limit)
	_, msg := heldBack()
	for _, want := range []string{"this host holds 3 local members of the 3 that --local-max-members allows", "so the pool creates 0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Capacity message %q lacks %q", msg, want)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the kubernetes pool fills regardless", func() error {
		var list kobev1.ClusterInstanceList
		if err := c.List(ctx, &list, client.InNamespace(nsA), client.MatchingLabels{kobev1.LabelPool: "k"}); err != nil {
			return err
		}
		if cc := capacity(kp); len(list.Items) != 2 || cc == nil || cc.Reason != kobev1.ReasonCapacityAvailable {
			return fmt.Errorf("%d members, Capacity %+v", len(list.Items), cc)
		}
		return nil
	})

	// The stray goes away: its place goes to a pool held back, and only one.
	if err := c.Delete(ctx, strayLocal); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "creation resumed into the freed place", func() error {
		if n := len(members(client.MatchingLabels{kobev1.LabelPool: "p"})); n != limit {
			return fmt.Errorf("%d members of the local pools, want %d", n, limit)
		}
		return nil
	})
	stable(limit)

	// Raising nothing, deleting a pool member (its finalizer is the
	// instance controller's, which does not run here) frees one more place.
	var list kobev1.ClusterInstanceList
	if err := c.List(ctx, &list, client.InNamespace(nsA), client.MatchingLabels{kobev1.LabelPool: "p"}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		t.Fatal("pool A has no member")
	}
	victim := &list.Items[0]
	victim.Finalizers = nil
	if err := c.Update(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the freed place was taken again, and the pools hold 4 wanted members at 3", func() error {
		n, names := localCount()
		if n != limit {
			return fmt.Errorf("%d local members %v", n, names)
		}
		for _, m := range names {
			if m == victim.Namespace+"/"+victim.Name {
				return fmt.Errorf("victim %s still listed", m)
			}
		}
		if held, _ := heldBack(); held == 0 {
			return fmt.Errorf("no pool held back with %v", names)
		}
		return nil
	})
	stable(limit)
}
