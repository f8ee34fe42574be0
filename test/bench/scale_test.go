//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

const (
	// lagTimeout bounds each status-lag sample; a sample that exceeds it
	// is reported as lagTimeout.
	lagTimeout      = 30 * time.Second
	scaleLagSamples = 5
	scaleCPUWindow  = 30 * time.Second
)

// measureScale creates -bench.scale-pools sim pools of -bench.scale-size
// members (readyAfter 0) and measures the time until every member is
// Ready, then, at rest, the operator's RSS and CPU over 30 s, and the status
// lag of a pool change (size +1) on a few pools. When the members are not
// all Ready within -bench.scale-wait, it reports how far they got and goes
// on with the rest.
func measureScale(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "scale")
	if err != nil {
		return nil, err
	}
	defer op.stop()
	pools, size := *flagScalePools, int32(*flagScaleSize)
	want := int32(pools) * size
	out := figures{"scale.pools": float64(pools), "scale.size": float64(size)}

	writes0, err := b.metrics.writes(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := b.createPools(ctx, ns, pools, size); err != nil {
		return nil, err
	}
	out["scale.create_pools_s"] = time.Since(start).Seconds()
	var ready int32
	lastLog := time.Now()
	err = pollAlive(ctx, op, *flagScaleWait, func() error {
		if time.Since(lastLog) > 30*time.Second {
			logf("scale: %d of %d members Ready by their pools' status after %s; %s; %s", ready, want, time.Since(start).Round(time.Second), b.membersReady(ctx, ns), controllerLoad(ctx, op))
			lastLog = time.Now()
		}
		var l kobev1.ClusterPoolList
		if err := b.env.Client.List(ctx, &l, inNamespace(ns)); err != nil {
			return err
		}
		ready = 0
		for _, p := range l.Items {
			ready += min(p.Status.Ready, size)
		}
		if ready < want {
			return fmt.Errorf("%d of %d members Ready after %s", ready, want, time.Since(start).Round(time.Second))
		}
		return nil
	})
	out["scale.ready_members"] = float64(ready)
	out["scale.all_ready_s"] = time.Since(start).Seconds()
	// What the fill cost the host's API server, per member Ready: the
	// writes that compete with the members' own.
	if writes1, err := b.metrics.writes(ctx); err == nil && ready > 0 {
		addWrites(out, "scale.writes.", writes1.Sub(writes0), int(ready))
	}
	if err != nil {
		if aliveErr := op.alive(); aliveErr != nil {
			return nil, aliveErr
		}
		// Reported as reached, not as all Ready: the report shows the count.
		out["scale.all_ready"] = 0
	} else {
		out["scale.all_ready"] = 1
	}
	rss, err := rssBytes(op.pid())
	if err != nil {
		return nil, err
	}
	out["scale.rss_at_ready_mb"] = float64(rss) / 1e6

	// At rest: let the last status writes land, then measure.
	time.Sleep(10 * time.Second)
	cpu0, err := cpuTime(op.pid())
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	time.Sleep(scaleCPUWindow)
	cpu1, err := cpuTime(op.pid())
	if err != nil {
		return nil, err
	}
	out["scale.cpu_percent"] = 100 * (cpu1 - cpu0).Seconds() / time.Since(t0).Seconds()
	if rss, err = rssBytes(op.pid()); err != nil {
		return nil, err
	}
	out["scale.rss_mb"] = float64(rss) / 1e6
	gm, err := operatorMetrics(ctx, op, "go_memstats_heap_inuse_bytes", "go_goroutines")
	if err != nil {
		return nil, err
	}
	out["scale.heap_inuse_mb"], out["scale.goroutines"] = gm[0]/1e6, gm[1]

	obs, rdy, err := b.statusLag(ctx, op, ns, pools, size)
	if err != nil {
		return nil, err
	}
	p := percentiles(obs, 0.5, 1)
	out["scale.lag_observed_p50_ms"], out["scale.lag_observed_max_ms"] = p[0], p[1]
	p = percentiles(rdy, 0.5, 1)
	out["scale.lag_ready_p50_ms"], out["scale.lag_ready_max_ms"] = p[0], p[1]
	return out, op.alive()
}

// membersReady counts the members themselves (a live list), to tell a slow
// fill from a pool status that lags it.
func (b *bench) membersReady(ctx context.Context, ns string) string {
	var l kobev1.ClusterInstanceList
	if err := b.env.Client.List(ctx, &l, inNamespace(ns)); err != nil {
		return "members: " + err.Error()
	}
	ready := 0
	for _, m := range l.Items {
		if m.Status.Phase == kobev1.InstanceReady {
			ready++
		}
	}
	return fmt.Sprintf("%d members exist, %d of them Ready", len(l.Items), ready)
}

func scalePoolName(i int) string { return fmt.Sprintf("scale-%04d", i) }

// createPools creates the pools with 16 writers.
func (b *bench) createPools(ctx context.Context, ns string, pools int, size int32) error {
	idx := make(chan int)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range 16 {
		wg.Go(func() {
			for i := range idx {
				if err := b.env.Client.Create(ctx, simPool(ns, scalePoolName(i), size, 0)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range pools {
		idx <- i
	}
	close(idx)
	wg.Wait()
	return errors.Join(errs...)
}

// statusLag changes the size of scaleLagSamples pools, one at a time, to
// size+1 and returns, for each, the time until the pool's status observed
// the new generation and until it counted size+1 Ready members (seen by a
// watch on the pool).
func (b *bench) statusLag(ctx context.Context, op *operator, ns string, pools int, size int32) (observed, ready []time.Duration, err error) {
	ww, err := client.NewWithWatch(b.cfg, client.Options{Scheme: b.env.Scheme})
	if err != nil {
		return nil, nil, err
	}
	for i := range scaleLagSamples {
		name := scalePoolName(i * pools / scaleLagSamples)
		w, err := ww.Watch(ctx, &kobev1.ClusterPoolList{}, client.InNamespace(ns),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
		if err != nil {
			return nil, nil, err
		}
		p := &kobev1.ClusterPool{}
		p.Name, p.Namespace = name, ns
		patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"size":%d}}`, size+1))
		start := time.Now()
		if err := b.env.Client.Patch(ctx, p, patch); err != nil {
			w.Stop()
			return nil, nil, err
		}
		o, r, err := waitLag(ctx, op, w, p.Generation, size+1, start)
		w.Stop()
		if err != nil {
			if aliveErr := op.alive(); aliveErr != nil {
				return nil, nil, aliveErr
			}
			// Reported as the bound it exceeded (see lagTimeout).
			logf("scale: pool %s after its size changed to %d: %v", name, size+1, err)
		}
		observed, ready = append(observed, o), append(ready, r)
	}
	return observed, ready, nil
}

func waitLag(ctx context.Context, op *operator, w watch.Interface, gen int64, want int32, start time.Time) (observed, ready time.Duration, err error) {
	timeout := time.After(lagTimeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for observed == 0 || ready == 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, 0, errors.New("watch closed")
			}
			p, isPool := ev.Object.(*kobev1.ClusterPool)
			if !isPool {
				continue
			}
			if observed == 0 && p.Status.ObservedGeneration >= gen {
				observed = time.Since(start)
			}
			if ready == 0 && p.Status.ObservedGeneration >= gen && p.Status.Ready >= want {
				ready = time.Since(start)
			}
		case <-tick.C:
			if err := op.alive(); err != nil {
				return 0, 0, err
			}
		case <-timeout:
			if observed == 0 {
				observed = lagTimeout
			}
			if ready == 0 {
				ready = lagTimeout
			}
			return observed, ready, fmt.Errorf("status not caught up within %s", lagTimeout)
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	return observed, ready, nil
}
