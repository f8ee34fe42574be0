//go:build bench

package bench

import (
	"context"
	"flag"
	"fmt"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

var flagFillLocal = flag.Int("bench.fill-local-size", 8, "Members of the local pool the fill-local measurement builds from zero.")

// fillHandoutEvery spaces the hand-outs made beside a fill.
const fillHandoutEvery = 250 * time.Millisecond

// measureFillLocal measures a fill of real members: a local pool of
// -bench.fill-local-size members created from zero until every member is
// Ready (kobe builds them all at once; nothing but the host's cores paces
// them), and whether those builds starve the hand-out path: hand-outs from
// a warm sim pool beside it, one every 250 ms, before the fill and while
// it runs.
func measureFillLocal(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "fill-local")
	if err != nil {
		return nil, err
	}
	defer b.stopLocal(ctx, op, ns, "fill-local")
	if err := b.env.Client.Create(ctx, simPool(ns, "beside", 2, 0)); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx, op, ns, time.Minute); err != nil {
		return nil, err
	}
	c := b.client(op, 1)
	idle, err := b.pacedHandouts(ctx, c, "beside", func(n int) bool { return n < 20 })
	if err != nil {
		return nil, fmt.Errorf("hand-outs before the fill: %w", err)
	}

	size := int32(*flagFillLocal)
	pool := &kobev1.ClusterPool{}
	pool.Name, pool.Namespace = "fill-local", ns
	pool.Spec.Size = ptr.To(size)
	pool.Spec.Backend.Type = kobev1.BackendLocal
	start := time.Now()
	if err := b.env.Client.Create(ctx, pool); err != nil {
		return nil, err
	}
	var (
		first, all  time.Duration
		maxCreating int
		pollErr     error
	)
	lastPoll := time.Time{}
	deadline := start.Add(5 * time.Minute)
	filling, err := b.pacedHandouts(ctx, c, "beside", func(int) bool {
		if time.Since(lastPoll) < time.Second {
			return true
		}
		lastPoll = time.Now()
		if err := op.alive(); err != nil {
			pollErr = err
			return false
		}
		ready, creating, err := b.fillState(ctx, ns, pool.Name)
		if err != nil {
			pollErr = err
			return false
		}
		maxCreating = max(maxCreating, creating)
		if ready > 0 && first == 0 {
			first = time.Since(start)
		}
		if ready >= int(size) {
			all = time.Since(start)
			return false
		}
		if time.Now().After(deadline) {
			pollErr = fmt.Errorf("%d of %d local members Ready after %s", ready, size, time.Since(start).Round(time.Second))
			return false
		}
		return true
	})
	if err == nil {
		err = pollErr
	}
	if err != nil {
		return nil, err
	}
	toReady, err := b.timesToReady(ctx, ns, pool.Name)
	if err != nil {
		return nil, err
	}
	logf("fill-local: %d members Ready after %s (first %s, at most %d Creating at once); %d hand-outs beside it",
		size, all.Round(time.Millisecond), first.Round(time.Millisecond), maxCreating, len(filling))
	pi, pf, pr := percentiles(idle, 0.5, 0.99), percentiles(filling, 0.5, 0.99), percentiles(toReady, 0.5, 1)
	return figures{
		"fill.local.size": float64(size), "fill.local.first_s": first.Seconds(), "fill.local.all_s": all.Seconds(),
		"fill.local.max_creating": float64(maxCreating), "fill.local.member_p50_s": pr[0] / 1000, "fill.local.member_max_s": pr[1] / 1000,
		"fill.handout.idle.n": float64(len(idle)), "fill.handout.idle.p50_ms": pi[0], "fill.handout.idle.p99_ms": pi[1],
		"fill.handout.filling.n": float64(len(filling)), "fill.handout.filling.p50_ms": pf[0], "fill.handout.filling.p99_ms": pf[1],
	}, op.alive()
}

// pacedHandouts leases a member of pool and releases it again, one every
// fillHandoutEvery, while more(hand-outs so far) says so, and returns each
// hand-out's latency (until Bound).
func (b *bench) pacedHandouts(ctx context.Context, c *apiClient, pool string, more func(n int) bool) ([]time.Duration, error) {
	var out []time.Duration
	tick := time.NewTicker(fillHandoutEvery)
	defer tick.Stop()
	for more(len(out)) {
		start := time.Now()
		l, _, pending, err := c.lease(ctx, pool)
		if err == nil && pending {
			err = c.waitBound(ctx, l.ID, time.Minute)
		}
		if err != nil {
			return out, err
		}
		out = append(out, time.Since(start))
		if err := c.release(ctx, l.ID); err != nil {
			return out, err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	return out, nil
}

// fillState counts the pool's members Ready and unleased, and those still
// Creating.
func (b *bench) fillState(ctx context.Context, ns, pool string) (ready, creating int, err error) {
	var l kobev1.ClusterInstanceList
	if err := b.env.Client.List(ctx, &l, inNamespace(ns), client.MatchingLabels{kobev1.LabelPool: pool}); err != nil {
		return 0, 0, err
	}
	for _, m := range l.Items {
		switch m.Status.Phase {
		case kobev1.InstanceReady:
			ready++
		case kobev1.InstanceCreating, "":
			creating++
		}
	}
	return ready, creating, nil
}

// timesToReady are the pool's members' own Create->Ready times
// (status.timeToReady).
func (b *bench) timesToReady(ctx context.Context, ns, pool string) ([]time.Duration, error) {
	var l kobev1.ClusterInstanceList
	if err := b.env.Client.List(ctx, &l, inNamespace(ns), client.MatchingLabels{kobev1.LabelPool: pool}); err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, m := range l.Items {
		if m.Status.TimeToReady != nil {
			out = append(out, m.Status.TimeToReady.Duration)
		}
	}
	return out, nil
}
