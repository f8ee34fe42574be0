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
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestFillWritesStatusOnce: a pool that fills from zero writes its status
// once for the fill's start: the ordinal reservation carries the counts and
// conditions, with the members it is about to create already counted as
// Creating, so neither the reconcile's own end nor the members' create
// events need a second write. (Issue 27: a fill of 1,000 pools paid about
// three such writes per pool.) No instance controller runs: the members
// stay Creating.
func TestFillWritesStatusOnce(t *testing.T) {
	env := testenv.Shared(t)
	ns := env.NewNamespace(t)
	ctx := t.Context()
	mgr := env.NewManager(t, ns)
	counting := &poolStatusCounter{Client: mgr.GetClient()}
	poolController(t, mgr, func(r *Reconciler) { r.Client = counting })
	testenv.StartManager(t, mgr)

	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "fill", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](3), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the pool to create its 3 members and count them", func() error {
		var members kobev1.ClusterInstanceList
		if err := env.Client.List(ctx, &members, client.InNamespace(ns)); err != nil {
			return err
		}
		var got kobev1.ClusterPool
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return err
		}
		if len(members.Items) != 3 || got.Status.Creating != 3 || got.Status.NextOrdinal != 3+ordinalBlock {
			return fmt.Errorf("%d members, status %+v", len(members.Items), got.Status)
		}
		return nil
	})
	// A write held back by the pacing would come within statusMinInterval.
	time.Sleep(statusMinInterval + time.Second)
	if n := counting.writes.Load(); n != 1 {
		t.Errorf("the pool wrote its status %d times to start a fill of 3 members, want 1", n)
	}
	var got kobev1.ClusterPool
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != kobev1.PoolFilling || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("status = phase %s, observedGeneration %d (generation %d); want Filling, observed", got.Status.Phase, got.Status.ObservedGeneration, got.Generation)
	}
}

// poolStatusCounter counts the pool status writes made through it (a
// pointer: the reconciler compares its clients).
type poolStatusCounter struct {
	client.Client
	writes atomic.Int64
}

func (c *poolStatusCounter) Status() client.SubResourceWriter {
	return &poolStatusWriter{SubResourceWriter: c.Client.Status(), counter: c}
}

type poolStatusWriter struct {
	client.SubResourceWriter
	counter *poolStatusCounter
}

func (w *poolStatusWriter) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	if _, ok := obj.(*kobev1.ClusterPool); ok {
		w.counter.writes.Add(1)
	}
	return w.SubResourceWriter.Patch(ctx, obj, p, opts...)
}

func (w *poolStatusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if _, ok := obj.(*kobev1.ClusterPool); ok {
		w.counter.writes.Add(1)
	}
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}
