//go:build heavy

package clusterpool

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// countingReader counts the live lists the pool controller makes.
type countingReader struct {
	client.Reader
	lists atomic.Int64
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists.Add(1)
	return c.Reader.List(ctx, list, opts...)
}

// TestPoolListsLiveOnlyToAct: a pool whose decision changes nothing is
// reconciled from the cache alone (no live list, whatever the number of
// members in the namespace); a pool that must create a member lists its
// members live first. No instance controller runs: the members are made by
// hand and stay as they are.
func TestPoolListsLiveOnlyToAct(t *testing.T) {
	env := testenv.Shared(t)
	ns := env.NewNamespace(t)
	ctx := t.Context()
	mgr := env.NewManager(t, ns)
	live := &countingReader{Reader: mgr.GetAPIReader()}
	r := poolController(t, mgr, func(r *Reconciler) { r.APIReader = live })

	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "rest", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](2), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	for o := range int32(2) {
		m := pool.NewMember(p, o, pool.TemplateHash(&p.Spec))
		if err := env.Client.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		m.Status.Phase = kobev1.InstanceReady
		if err := env.Client.Status().Update(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	testenv.StartManager(t, mgr)
	waitPool := func(what string, ok func(*kobev1.ClusterPool) bool) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, what, func() error {
			var got kobev1.ClusterPool
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
				return err
			}
			if !ok(&got) {
				return fmt.Errorf("generation %d, status %+v", got.Generation, got.Status)
			}
			return nil
		})
	}
	waitPool("the pool to count its 2 Ready members", func(g *kobev1.ClusterPool) bool {
		// Ordinals 0 and 1 exist: the pool reserves the block after them.
		return g.Status.Ready == 2 && g.Status.NextOrdinal == 2+ordinalBlock && g.Status.ObservedGeneration == g.Generation
	})
	if n := live.lists.Load(); n != 0 {
		t.Errorf("the pool listed its members live %d times to find that it had what it wanted", n)
	}

	// A change the pool decides on but that creates nothing.
	var cur kobev1.ClusterPool
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.HealthCheck = &kobev1.HealthCheckSpec{IntervalSeconds: 45}
	if err := env.Client.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	waitPool("the pool to observe its new generation", func(g *kobev1.ClusterPool) bool {
		return g.Generation == cur.Generation && g.Status.ObservedGeneration == cur.Generation
	})
	if n := live.lists.Load(); n != 0 {
		t.Errorf("a pool at rest listed its members live %d times", n)
	}

	// Deleting a member (it stays, held by its finalizer: no instance
	// controller runs) makes the pool create a replacement. The cache holds
	// every create and delete this pool made, so no live list is needed.
	gone := pool.NewMember(p, 1, pool.TemplateHash(&p.Spec))
	if err := env.Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "a replacement member", func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pool.MemberName(p.Name, 2)}, &kobev1.ClusterInstance{})
	})
	if n := live.lists.Load(); n != 0 {
		t.Errorf("the pool listed its members live %d times although the cache showed all its own writes", n)
	}

	// A create of its own that the cache has not shown (recorded here by
	// hand: a lagging cache) makes the pool wait for the cache, and, as
	// this one never shows, list live before it acts (cacheWait later).
	r.expected.expect(cur.UID, []string{pool.MemberName(p.Name, 99)}, nil, r.Clock.Now())
	if err := env.Client.Delete(ctx, pool.NewMember(p, 0, pool.TemplateHash(&p.Spec))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "a second replacement member", func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pool.MemberName(p.Name, 3)}, &kobev1.ClusterInstance{})
	})
	if n := live.lists.Load(); n == 0 {
		t.Errorf("the pool created a member on a cache that lags its own writes without listing its members live")
	}
	t.Cleanup(func() {
		// Let the hand-made members go: nothing else removes their finalizer.
		var ms kobev1.ClusterInstanceList
		if err := env.Client.List(context.Background(), &ms, client.InNamespace(ns)); err != nil {
			return
		}
		for i := range ms.Items {
			m := &ms.Items[i]
			m.Finalizers = nil
			_ = env.Client.Update(context.Background(), m)
		}
	})
}
