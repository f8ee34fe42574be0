//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

const (
	// refillPoolSize is the refilling pool's size: twice the largest
	// caller count tried, so that a member is Ready when a caller returns.
	refillPoolSize = 64
	// warmPoolSize is the size of each pre-warmed pool (a pool holds at
	// most 500).
	warmPoolSize = 500
)

// cycleStats is one lease-and-release run.
type cycleStats struct {
	callers  int
	cycles   int64
	pending  int64
	elapsed  time.Duration
	leaseLat []time.Duration
	relLat   []time.Duration
	// boundLat runs from each POST to Bound: for a lease answered Pending,
	// until the poll saw it Bound.
	boundLat []time.Duration
}

func (s cycleStats) rate() float64 { return float64(s.cycles) / s.elapsed.Seconds() }

// measureCycles measures lease-and-release cycles per second (POST, then
// DELETE) sustained for -bench.cycles-duration with the sim backend
// refilling (readyAfter 0) a pool of refillPoolSize. The caller count is the
// one a short sweep (first run only) found fastest.
func measureCycles(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, stop, err := b.cyclesSetup(ctx, "cycles")
	if err != nil {
		return nil, err
	}
	defer stop()
	out := figures{}
	if b.best == 0 {
		best, err := b.sweep(ctx, op, ns, refillPool, out)
		if err != nil {
			return nil, err
		}
		b.best = best
	}
	out["cycles.callers"] = float64(b.best)
	before, err := b.quiet(ctx, op, time.Second)
	if err != nil {
		return nil, err
	}
	shares, err := newCPUShares(op)
	if err != nil {
		return nil, err
	}
	sampling, stopSampling := context.WithCancel(ctx)
	floor := b.readyFloor(sampling, ns, refillPool)
	st, err := b.cycles(ctx, op, []string{refillPool}, b.best, *flagCyclesFor, true)
	stopSampling()
	out["cycles.refill.ready_min"] = float64(<-floor)
	if err != nil {
		return nil, err
	}
	if err := shares.add(out, "cpu.cycles_refill."); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx, op, ns, 3*time.Minute); err != nil {
		return nil, err
	}
	after, err := b.quiet(ctx, op, 2*time.Second)
	if err != nil {
		return nil, err
	}
	addCycle(out, "cycles.refill.", st)
	addWrites(out, "writes.cycle_refill.", after.Sub(before), int(st.cycles))
	logf("cycles refilling: %d callers, %.0f cycles/s, %d answered Pending", b.best, st.rate(), st.pending)
	b.refillRate = st.rate()
	return out, op.alive()
}

// measureCyclesWarm measures the same from pre-warmed pools holding a Ready
// member for every cycle the refilling run managed in as long, plus a
// third (at most -bench.prewarm-max). They refill too, as every pool does,
// but no caller depends on it. Run once: the fill is long.
//
// Replacements are not parked (a long readyAfter): a Creating sim member
// patches its status on every requeue, which would load the run with
// writes that no hand-out causes.
func measureCyclesWarm(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, stop, err := b.cyclesSetup(ctx, "cycles-warm")
	if err != nil {
		return nil, err
	}
	defer stop()
	out := figures{}
	if b.best == 0 || b.refillRate == 0 {
		// Run alone: find the caller count and the rate first.
		if b.best, err = b.sweep(ctx, op, ns, refillPool, out); err != nil {
			return nil, err
		}
		b.refillRate = out[fmt.Sprintf("cycles.sweep.c%d.per_s", b.best)]
	}
	want := min(int(b.refillRate*flagCyclesFor.Seconds()*4/3), *flagPrewarmMax)
	pools := max(1, (want+warmPoolSize-1)/warmPoolSize)
	var names []string
	fillStart := time.Now()
	for i := range pools {
		name := fmt.Sprintf("cycles-warm-%d", i)
		names = append(names, name)
		if err := b.env.Client.Create(ctx, simPool(ns, name, warmPoolSize, 0)); err != nil {
			return nil, err
		}
	}
	if err := b.waitSettled(ctx, op, ns, 15*time.Minute); err != nil {
		return nil, fmt.Errorf("pre-warming %d members: %w", pools*warmPoolSize, err)
	}
	fill := time.Since(fillStart)
	logf("cycles: %d members pre-warmed in %s", pools*warmPoolSize, fill.Round(time.Second))
	out["cycles.warm.members"] = float64(pools * warmPoolSize)
	out["cycles.warm.fill_s"] = fill.Seconds()
	out["cycles.warm.fill_per_s"] = float64(pools*warmPoolSize) / fill.Seconds()
	out["cycles.warm.callers"] = float64(b.best)
	before, err := b.quiet(ctx, op, time.Second)
	if err != nil {
		return nil, err
	}
	shares, err := newCPUShares(op)
	if err != nil {
		return nil, err
	}
	st, err := b.cycles(ctx, op, names, b.best, *flagCyclesFor, false)
	if err != nil {
		return nil, err
	}
	if err := shares.add(out, "cpu.cycles_warm."); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx, op, ns, 5*time.Minute); err != nil {
		return nil, err
	}
	after, err := b.quiet(ctx, op, 2*time.Second)
	if err != nil {
		return nil, err
	}
	addCycle(out, "cycles.warm.", st)
	addWrites(out, "writes.cycle_warm.", after.Sub(before), int(st.cycles))
	logf("cycles pre-warmed: %d callers, %.0f cycles/s, %d answered Pending", b.best, st.rate(), st.pending)
	return out, op.alive()
}

// refillPool is the refilling pool of the cycles measurements.
const refillPool = "cycles-refill"

// cyclesSetup starts an operator on a fresh namespace with a settled
// refilling pool.
func (b *bench) cyclesSetup(ctx context.Context, name string) (string, *operator, func(), error) {
	ns, op, err := b.operatorIn(ctx, name)
	if err != nil {
		return "", nil, nil, err
	}
	stop := op.stop
	if err := b.env.Client.Create(ctx, simPool(ns, refillPool, refillPoolSize, 0)); err != nil {
		stop()
		return "", nil, nil, err
	}
	if err := b.waitSettled(ctx, op, ns, 3*time.Minute); err != nil {
		stop()
		return "", nil, nil, err
	}
	return ns, op, stop, nil
}

// sweep runs each caller count of -bench.cycles-callers briefly and returns
// the fastest.
func (b *bench) sweep(ctx context.Context, op *operator, ns, pool string, out figures) (int, error) {
	best, bestRate := 0, 0.0
	for _, f := range strings.Split(*flagCallers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > refillPoolSize/2 {
			return 0, fmt.Errorf("-bench.cycles-callers: %q is not a count in 1..%d", f, refillPoolSize/2)
		}
		st, err := b.cycles(ctx, op, []string{pool}, n, *flagCyclesSweep, true)
		if err != nil {
			return 0, err
		}
		out[fmt.Sprintf("cycles.sweep.c%d.per_s", n)] = st.rate()
		logf("cycles sweep: %d callers, %.0f cycles/s", n, st.rate())
		if st.rate() > bestRate {
			best, bestRate = n, st.rate()
		}
		if err := b.waitSettled(ctx, op, ns, 3*time.Minute); err != nil {
			return 0, err
		}
	}
	return best, nil
}

// cycles runs callers goroutines that lease and release until d has passed;
// caller i's j-th cycle draws from pools[(i+j) % len(pools)]. A Pending
// answer is waited for when refilling, else released and counted.
func (b *bench) cycles(ctx context.Context, op *operator, pools []string, callers int, d time.Duration, refilling bool) (cycleStats, error) {
	c := b.client(op, callers)
	st := cycleStats{callers: callers}
	var (
		mu      sync.Mutex
		errs    []error
		wg      sync.WaitGroup
		cycles  atomic.Int64
		pending atomic.Int64
	)
	start := time.Now()
	deadline := start.Add(d)
	for i := range callers {
		wg.Go(func() {
			var leaseLat, relLat, boundLat []time.Duration
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			for j := i; time.Now().Before(deadline); j++ {
				asked := time.Now()
				l, took, isPending, err := c.lease(ctx, pools[j%len(pools)])
				if err != nil {
					fail(err)
					return
				}
				if isPending {
					pending.Add(1)
					if refilling {
						if err := c.waitBound(ctx, l.ID, time.Minute); err != nil {
							fail(err)
							return
						}
					}
				}
				bound := time.Since(asked)
				t0 := time.Now()
				if err := c.release(ctx, l.ID); err != nil {
					fail(err)
					return
				}
				if isPending && !refilling {
					continue
				}
				relLat = append(relLat, time.Since(t0))
				leaseLat = append(leaseLat, took)
				boundLat = append(boundLat, bound)
				cycles.Add(1)
			}
			mu.Lock()
			st.leaseLat = append(st.leaseLat, leaseLat...)
			st.relLat = append(st.relLat, relLat...)
			st.boundLat = append(st.boundLat, boundLat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	st.cycles, st.pending = cycles.Load(), pending.Load()
	if err := errors.Join(op.alive(), errors.Join(errs...)); err != nil {
		return st, fmt.Errorf("lease-and-release with %d callers: %w", callers, err)
	}
	if st.cycles == 0 {
		return st, errors.New("no lease-and-release cycle completed")
	}
	return st, nil
}

func addCycle(out figures, prefix string, st cycleStats) {
	out[prefix+"per_s"] = st.rate()
	out[prefix+"cycles"] = float64(st.cycles)
	out[prefix+"pending"] = float64(st.pending)
	out[prefix+"seconds"] = st.elapsed.Seconds()
	p := percentiles(st.leaseLat, 0.5, 0.99)
	out[prefix+"lease_p50_ms"], out[prefix+"lease_p99_ms"] = p[0], p[1]
	p = percentiles(st.relLat, 0.5, 0.99)
	out[prefix+"release_p50_ms"], out[prefix+"release_p99_ms"] = p[0], p[1]
}

// readyFloor samples the Ready count in pool's status every 500 ms until
// ctx ends and sends the fewest it saw: whether the refill kept up with the
// leases (the status is written at most once a second under churn).
func (b *bench) readyFloor(ctx context.Context, ns, pool string) <-chan int32 {
	out := make(chan int32, 1)
	go func() {
		floor := int32(-1)
		for ctx.Err() == nil {
			var p kobev1.ClusterPool
			if err := b.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: pool}, &p); err == nil && (floor < 0 || p.Status.Ready < floor) {
				floor = p.Status.Ready
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
		out <- floor
	}()
	return out
}

// benchWorkDir holds the operators' logs: $KOBE_BENCH_WORK when set (kept
// after the run, to read why a figure moved), else the test's temporary
// directory.
func benchWorkDir(t interface{ TempDir() string }) string {
	if d := os.Getenv("KOBE_BENCH_WORK"); d != "" {
		return d
	}
	return t.TempDir()
}
