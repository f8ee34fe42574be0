//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// measureFrozen measures hand-outs from a local pool of three members of
// which one runs and two are frozen (warm.running 1, issue 28): three
// leases asked one after another, each waiting until it is Bound with a
// kubeconfig. The first takes the running member; the others wait for a
// frozen member's thaw and health check (the pool thaws the next one as
// soon as the running one is bound, and one more per waiting lease).
// Each round releases the three and waits until two members are frozen
// again. Root only: the cgroup freezer.
func measureFrozen(ctx context.Context, b *bench, _ int) (figures, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("freezing members needs root (the cgroup freezer): run make bench as root")
	}
	ns, op, err := b.operatorIn(ctx, "frozen")
	if err != nil {
		return nil, err
	}
	defer b.stopLocal(ctx, op, ns, "frozen")
	pool := &kobev1.ClusterPool{}
	pool.Name, pool.Namespace = "frozen", ns
	pool.Spec.Size = ptr.To[int32](3)
	pool.Spec.Backend.Type = kobev1.BackendLocal
	pool.Spec.Warm = &kobev1.WarmSpec{Running: ptr.To[int32](1)}
	if err := b.env.Client.Create(ctx, pool); err != nil {
		return nil, err
	}
	c := b.client(op, 1)
	var fromRunning, fromFrozen []time.Duration
	for range *flagFrozenRounds {
		if err := b.waitSettled(ctx, op, ns, 5*time.Minute); err != nil {
			return nil, err
		}
		if err := b.waitFrozen(ctx, op, pool, 2, 2*time.Minute); err != nil {
			return nil, err
		}
		var ids []string
		for i := range 3 {
			start := time.Now()
			l, _, pending, err := c.lease(ctx, pool.Name)
			if err != nil {
				return nil, err
			}
			if pending {
				if err := c.waitBound(ctx, l.ID, time.Minute); err != nil {
					return nil, fmt.Errorf("lease %d of the round: %w", i+1, err)
				}
			}
			if i == 0 {
				fromRunning = append(fromRunning, time.Since(start))
			} else {
				fromFrozen = append(fromFrozen, time.Since(start))
			}
			ids = append(ids, l.ID)
		}
		for _, id := range ids {
			if err := c.release(ctx, id); err != nil {
				return nil, err
			}
		}
	}
	r, f := percentiles(fromRunning, 0.5, 1), percentiles(fromFrozen, 0.5, 1)
	return figures{"frozen.running.p50_ms": r[0], "frozen.running.max_ms": r[1],
		"frozen.thawed.p50_ms": f[0], "frozen.thawed.max_ms": f[1], "frozen.thawed.n": float64(len(fromFrozen))}, op.alive()
}

// waitFrozen waits until n of pool's Ready, unbound members are frozen
// (their Frozen condition True).
func (b *bench) waitFrozen(ctx context.Context, op *operator, pool *kobev1.ClusterPool, n int, within time.Duration) error {
	return pollAlive(ctx, op, within, func() error {
		var l kobev1.ClusterInstanceList
		if err := b.env.Client.List(ctx, &l, inNamespace(pool.Namespace), client.MatchingLabels{kobev1.LabelPool: pool.Name}); err != nil {
			return err
		}
		frozen := 0
		for _, m := range l.Items {
			if m.Status.Phase == kobev1.InstanceReady && m.Spec.LeaseRef == nil && meta.IsStatusConditionTrue(m.Status.Conditions, kobev1.ConditionFrozen) {
				frozen++
			}
		}
		if frozen < n {
			return fmt.Errorf("%d of %d members frozen", frozen, n)
		}
		return nil
	})
}
