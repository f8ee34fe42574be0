//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// handoutCallers are the concurrency levels of the latency measurement.
var handoutCallers = []int{1, 16, 64}

// measureHandout measures request -> Bound kubeconfig through the operator's
// API at 1, 16 and 64 concurrent callers. Each level gets its own sim pool
// (readyAfter 1s) holding at least as many Ready members as the level hands
// out, so no caller ever needs to wait for a member; the pool refills in
// the background as it would in use.
func measureHandout(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "handout")
	if err != nil {
		return nil, err
	}
	defer op.stop()
	n := min(*flagHandouts, 500)
	out := figures{}
	for _, callers := range handoutCallers {
		per := n / callers
		total := per * callers
		name := fmt.Sprintf("handout-c%d", callers)
		if err := b.env.Client.Create(ctx, simPool(ns, name, int32(total), time.Second)); err != nil {
			return nil, err
		}
		if err := b.waitSettled(ctx, op, ns, 5*time.Minute); err != nil {
			return nil, fmt.Errorf("filling pool %s: %w", name, err)
		}
		shares, err := newCPUShares(op)
		if err != nil {
			return nil, err
		}
		durBefore, err := b.metrics.requestDurations(ctx)
		if err != nil {
			return nil, err
		}
		phasesBefore, err := handoutPhases(ctx, op)
		if err != nil {
			return nil, err
		}
		lat, elapsed, pending, err := b.handouts(ctx, op, name, callers, per)
		if err != nil {
			return nil, err
		}
		phasesAfter, err := handoutPhases(ctx, op)
		if err != nil {
			return nil, err
		}
		for phase, v := range phasesAfter {
			if n := v[0] - phasesBefore[phase][0]; n > 0 {
				out[fmt.Sprintf("handout.c%d.phase_mean_ms[%s]", callers, phase)] = 1000 * (v[1] - phasesBefore[phase][1]) / n
			}
		}
		if err := shares.add(out, fmt.Sprintf("cpu.handout_c%d.", callers)); err != nil {
			return nil, err
		}
		durAfter, err := b.metrics.requestDurations(ctx)
		if err != nil {
			return nil, err
		}
		for k, v := range durAfter {
			if n := v[0] - durBefore[k][0]; n > 0 && writeVerbs[k.Verb] && !notKobe(k) {
				out[fmt.Sprintf("apiserver.handout_c%d.mean_ms[%s]", callers, k)] = 1000 * (v[1] - durBefore[k][1]) / n
				out[fmt.Sprintf("apiserver.handout_c%d.count[%s]", callers, k)] = n
			}
		}
		p := percentiles(lat, 0.5, 0.95, 0.99, 1)
		key := fmt.Sprintf("handout.c%d.", callers)
		out[key+"p50_ms"], out[key+"p95_ms"], out[key+"p99_ms"], out[key+"max_ms"] = p[0], p[1], p[2], p[3]
		out[key+"n"] = float64(len(lat))
		out[key+"pending"] = float64(pending)
		out[key+"per_s"] = float64(len(lat)) / elapsed.Seconds()
	}
	return out, op.alive()
}

// handouts runs callers goroutines doing per hand-outs each and returns
// every latency (request to a Bound kubeconfig), the wall time and how many
// were answered Pending. A Pending answer (the operator queued the lease
// although its pool held a Ready member for every hand-out) is polled, as a
// caller would, until Bound: its latency runs until then.
func (b *bench) handouts(ctx context.Context, op *operator, pool string, callers, per int) ([]time.Duration, time.Duration, int, error) {
	c := b.client(op, callers)
	var (
		mu      sync.Mutex
		lat     = make([]time.Duration, 0, callers*per)
		pending int
		errs    []error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for range per {
				t0 := time.Now()
				l, took, isPending, err := c.lease(ctx, pool)
				if err == nil && isPending {
					err = c.waitBound(ctx, l.ID, time.Minute)
					took = time.Since(t0)
				}
				mu.Lock()
				if isPending {
					pending++
				}
				if err != nil {
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				lat = append(lat, took)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(op.alive(), errors.Join(errs...)); err != nil {
		return nil, 0, 0, fmt.Errorf("hand-outs from %s with %d callers: %w\noperator's errors:\n%s", pool, callers, err, op.errorLines(20))
	}
	return lat, elapsed, pending, nil
}

// waitSettled waits until every pool of ns holds its size in Ready members
// and nothing is Creating or Recycling.
func (b *bench) waitSettled(ctx context.Context, op *operator, ns string, within time.Duration) error {
	err := pollAlive(ctx, op, within, func() error {
		var l kobev1.ClusterPoolList
		if err := b.env.Client.List(ctx, &l, inNamespace(ns)); err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Status.ObservedGeneration < p.Generation || p.Status.Ready < *p.Spec.Size || p.Status.Creating > 0 || p.Status.Recycling > 0 {
				return fmt.Errorf("pool %s: ready %d of %d, creating %d, recycling %d, leased %d, failures %d, observed generation %d of %d",
					p.Name, p.Status.Ready, *p.Spec.Size, p.Status.Creating, p.Status.Recycling, p.Status.Leased, p.Status.Failures,
					p.Status.ObservedGeneration, p.Generation)
			}
		}
		return nil
	})
	return err
}
