//go:build bench

package bench

import (
	"context"
	"flag"
	"time"
)

var flagBurstFor = flag.Duration("bench.burst-duration", 20*time.Second, "How long the burst measurement's callers lease and release.")

const (
	// burstPool is the burst measurement's pool: burstPoolSize warm members
	// for burstCallers callers, so that at any moment about half the leases
	// find no member Ready and wait for the refill.
	burstPool     = "burst"
	burstPoolSize = 8
	burstCallers  = 16
)

// measureBurst measures demand beyond the warm members (issue 27: with 16
// callers, p99 under 3 s and a refill of at least 50 sim members a
// second): burstCallers callers lease and release for -bench.burst-duration
// from a sim pool of burstPoolSize (readyAfter 0). A lease answered Pending
// is asked for as kobe lease does (waitBound) until Bound; its latency runs from the POST
// to Bound. Every hand-out beyond the pool's size took a member the refill
// built during the run, so (hand-outs - size) / duration is what the refill
// sustained, at least.
func measureBurst(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "burst")
	if err != nil {
		return nil, err
	}
	defer op.stop()
	if err := b.env.Client.Create(ctx, simPool(ns, burstPool, burstPoolSize, 0)); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx, op, ns, 3*time.Minute); err != nil {
		return nil, err
	}
	shares, err := newCPUShares(op)
	if err != nil {
		return nil, err
	}
	st, err := b.cycles(ctx, op, []string{burstPool}, burstCallers, *flagBurstFor, true)
	if err != nil {
		return nil, err
	}
	out := figures{}
	if err := shares.add(out, "cpu.burst."); err != nil {
		return nil, err
	}
	out["burst.handouts"] = float64(st.cycles)
	out["burst.pending"] = float64(st.pending)
	out["burst.seconds"] = st.elapsed.Seconds()
	out["burst.refill_per_s"] = float64(max(st.cycles-burstPoolSize, 0)) / st.elapsed.Seconds()
	p := percentiles(st.boundLat, 0.5, 0.99)
	out["burst.bound_p50_ms"], out["burst.bound_p99_ms"] = p[0], p[1]
	logf("burst: %d callers on a pool of %d: %d hand-outs (%d answered Pending), p99 %.0f ms to Bound, refill %.0f members/s",
		burstCallers, burstPoolSize, st.cycles, st.pending, p[1], out["burst.refill_per_s"])
	return out, op.alive()
}
