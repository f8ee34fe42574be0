//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
)

// measureRefillSim measures, for a sim pool of one member (readyAfter 0),
// the time from a bind (the request that bound the only member) to its
// replacement being Ready: what kobe itself adds to a refill.
func measureRefillSim(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "refill")
	if err != nil {
		return nil, err
	}
	defer op.stop()
	samples, err := b.refill(ctx, op, simPool(ns, "refill", 1, 0), *flagRefillSim, time.Minute)
	if err != nil {
		return nil, err
	}
	p := percentiles(samples, 0.5, 1)
	return figures{"refill.sim.p50_ms": p[0], "refill.sim.max_ms": p[1], "refill.sim.n": float64(len(samples))}, op.alive()
}

// measureRefillLocal is the same for a local pool of one member: real
// etcd, kube-apiserver and kube-controller-manager processes, the operator's
// default local flags (its --local-data-dir is the harness's own).
func measureRefillLocal(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "refill-local")
	if err != nil {
		return nil, err
	}
	defer b.stopLocal(ctx, op, ns, "refill-local")
	pool := &kobev1.ClusterPool{}
	pool.Name, pool.Namespace = "refill-local", ns
	pool.Spec.Size = ptr.To[int32](1)
	pool.Spec.Backend.Type = kobev1.BackendLocal
	start := time.Now()
	samples, err := b.refill(ctx, op, pool, *flagRefillLocal, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	p := percentiles(samples, 0.5, 1)
	return figures{"refill.local.p50_ms": p[0], "refill.local.max_ms": p[1], "refill.local.n": float64(len(samples)),
		"refill.local.total_s": time.Since(start).Seconds()}, op.alive()
}

// stopLocal stops an operator whose namespace ns holds local members: the
// members are processes, so they are destroyed through the operator before
// it stops, then nothing of them may be left.
func (b *bench) stopLocal(ctx context.Context, op *operator, ns, what string) {
	dataRoot := filepath.Join(b.work, "members-"+ns)
	err := b.deleteAll(ctx, op, ns, 3*time.Minute)
	op.stop()
	procs, _ := memberproc.Running(dataRoot)
	var left []memberproc.Process
	for _, p := range procs {
		if !strings.Contains(p.Cmdline, "kobe-operator") {
			left = append(left, p)
		}
	}
	memberproc.Kill(left)
	if err != nil || len(left) > 0 {
		fmt.Printf("%s cleanup: %v; processes left and killed: %v\n", what, err, left)
	}
}

// refill creates pool, waits until its member is Ready, then n times: leases
// the member, waits for the replacement to be Ready (seen by a watch on the
// pool's members), releases the lease and waits for the pool to settle.
// A sample is the time from the lease request to the replacement's Ready.
func (b *bench) refill(ctx context.Context, op *operator, pool *kobev1.ClusterPool, n int, within time.Duration) ([]time.Duration, error) {
	ns := pool.Namespace
	if err := b.env.Client.Create(ctx, pool); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx, op, ns, within); err != nil {
		return nil, err
	}
	c := b.client(op, 1)
	ww, err := client.NewWithWatch(b.cfg, client.Options{Scheme: b.env.Scheme})
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for range n {
		var l kobev1.ClusterInstanceList
		if err := b.env.Client.List(ctx, &l, inNamespace(ns), client.MatchingLabels{kobev1.LabelPool: pool.Name}); err != nil {
			return nil, err
		}
		known := map[string]bool{}
		for _, m := range l.Items {
			known[m.Name] = true
		}
		w, err := ww.Watch(ctx, &kobev1.ClusterInstanceList{}, inNamespace(ns), client.MatchingLabels{kobev1.LabelPool: pool.Name})
		if err != nil {
			return nil, err
		}
		start := time.Now()
		lease, _, pending, err := c.lease(ctx, pool.Name)
		if err != nil || pending {
			w.Stop()
			return nil, fmt.Errorf("leasing the pool's member: pending %v, %w", pending, err)
		}
		took, err := waitNewReady(ctx, op, w, known, start, within)
		w.Stop()
		if err != nil {
			return nil, fmt.Errorf("waiting for the replacement of the member bound to %s: %w", lease.ID, err)
		}
		out = append(out, took)
		if err := c.release(ctx, lease.ID); err != nil {
			return nil, err
		}
		if err := b.waitSettled(ctx, op, ns, within); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// waitNewReady returns the time from start to the first watch event showing
// a member not in known Ready.
func waitNewReady(ctx context.Context, op *operator, w watch.Interface, known map[string]bool, start time.Time, within time.Duration) (time.Duration, error) {
	timeout := time.After(within)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, errors.New("watch closed")
			}
			m, isMember := ev.Object.(*kobev1.ClusterInstance)
			if isMember && ev.Type != watch.Deleted && !known[m.Name] && m.Status.Phase == kobev1.InstanceReady && m.Spec.LeaseRef == nil {
				return time.Since(start), nil
			}
		case <-tick.C:
			if err := op.alive(); err != nil {
				return 0, err
			}
		case <-timeout:
			return 0, fmt.Errorf("no new Ready member within %s", within)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// deleteAll deletes the namespace's leases, pools and members through the
// running operator and waits until no member is left.
func (b *bench) deleteAll(ctx context.Context, op *operator, ns string, within time.Duration) error {
	c := b.env.Client
	for _, o := range []client.Object{&kobev1.ClusterLease{}, &kobev1.ClusterPool{}, &kobev1.ClusterInstance{}} {
		if err := c.DeleteAllOf(ctx, o, client.InNamespace(ns)); err != nil {
			return err
		}
	}
	return pollAlive(ctx, op, within, func() error {
		var l kobev1.ClusterInstanceList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d members left", len(l.Items))
		}
		return nil
	})
}
