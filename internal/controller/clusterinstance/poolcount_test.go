//go:build integration

package clusterinstance

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// noCount marks a pool whose failures poolCounter leaves uncounted.
const noCount = "test.kobe.kunobi.ninja/no-count"

// poolCounter stands in for the pool controller's counting step here (no
// pool controller runs in this harness; it would create and remove
// members): it applies pool.CountFailures, the function the pool
// controller runs, and writes the status fenced, as the pool controller
// does. The count itself is tested in internal/pool and with the real pool
// controller in internal/controller/clusterpool.
type poolCounter struct{ c client.Client }

func (p *poolCounter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pl := &kobev1.ClusterPool{}
	if err := p.c.Get(ctx, req.NamespacedName, pl); err != nil || pl.Annotations[noCount] != "" {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var list kobev1.ClusterInstanceList
	if err := p.c.List(ctx, &list, client.InNamespace(pl.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	members := slices.DeleteFunc(list.Items, func(m kobev1.ClusterInstance) bool { return m.Spec.PoolRef.Name != pl.Name })
	before := pl.DeepCopy()
	pool.CountFailures(&pl.Status, members)
	return ctrl.Result{}, client.IgnoreNotFound(p.c.Status().Patch(ctx, pl, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})))
}

func setupPoolCounter(t *testing.T, mgr ctrl.Manager) {
	err := ctrl.NewControllerManagedBy(mgr).Named("test-pool-counter").
		For(&kobev1.ClusterPool{}).
		Watches(&kobev1.ClusterInstance{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			m := o.(*kobev1.ClusterInstance)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.PoolRef.Name}}}
		})).
		Complete(&poolCounter{c: mgr.GetClient()})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFailedMemberWaitsForItsCount: a member that failed to become Ready is
// destroyed but keeps its object (and finalizer) until its pool's status
// names it as counted; then it goes at once, woken by the pool's change.
func TestFailedMemberWaitsForItsCount(t *testing.T) {
	h := startHarness(t)
	ns := h.namespace(t)
	h.fake.set(ns+"/pool-p-0", memberPlan{after: backend.StateFailed})
	p, m := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) { p.Annotations = map[string]string{noCount: "true"} })
	h.waitPhase(t, m, kobev1.InstanceRecycling, 15*time.Second)
	testenv.Consistently(t, 3*time.Second, "the uncounted failed member stays", func() error {
		_, present := h.get(t, m)
		return holds(present, "it went before its pool counted it")
	})
	got := h.pool(t, p)
	before := got.DeepCopy()
	got.Status.CountedFailures = []string{m.Name}
	if err := h.c.Status().Patch(t.Context(), got, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, m, 5*time.Second)
}
