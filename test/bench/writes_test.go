package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

const (
	writesHandouts = 50 // hand-outs in the counted window
	writesSamples  = 12 // single hand-outs whose writes are read right after the answer
)

// measureWrites counts the API writes one hand-out costs, from
// kube-apiserver's own apiserver_request_total: over a window of
// sequential hand-outs (and everything they set off, up to the replacement
// member being Ready), by resource/subresource/verb; and, for single
// hand-outs, the writes already counted when the answer arrived. The single
// hand-outs, each started once kobe's writes have been quiet for 1.5 s, also
// give the latency of a hand-out that competes with no earlier one's
// after-effects.
func measureWrites(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "writes")
	if err != nil {
		return nil, err
	}
	defer op.stop()
	const pool = "writes"
	if err := b.env.Client.Create(ctx, simPool(ns, pool, writesHandouts+writesSamples, time.Second)); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx, op, ns, 3*time.Minute); err != nil {
		return nil, err
	}
	c := b.client(op, 1)
	out := figures{}

	// Writes seen by the time the answer arrived, one hand-out at a time,
	// each after the previous one's after-effects have settled.
	var (
		byAnswer []float64
		isolated []time.Duration
	)
	for range writesSamples {
		before, err := b.quiet(ctx, op, 1500*time.Millisecond)
		if err != nil {
			return nil, err
		}
		l, took, pending, err := c.lease(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("hand-out for the writes sample: %w", err)
		}
		after, err := b.metrics.writes(ctx)
		if err != nil {
			return nil, err
		}
		if pending {
			// Not a fast-path hand-out: no sample.
			out["writes.handout.by_answer_pending"]++
			if err := c.waitBound(ctx, l.ID, time.Minute); err != nil {
				return nil, err
			}
			continue
		}
		d := after.sub(before)
		var n float64
		for k, v := range d {
			if !notKobe(k) {
				n += v
			}
		}
		byAnswer = append(byAnswer, n)
		isolated = append(isolated, took)
	}
	if len(byAnswer) == 0 {
		return nil, fmt.Errorf("every one of %d single hand-outs was answered Pending", writesSamples)
	}
	p := percentiles(isolated, 0.5, 0.95, 1)
	out["handout.isolated.p50_ms"], out["handout.isolated.p95_ms"], out["handout.isolated.max_ms"] = p[0], p[1], p[2]
	out["handout.isolated.n"] = float64(len(isolated))
	slices.Sort(byAnswer)
	out["writes.handout.by_answer_min"] = byAnswer[0]
	out["writes.handout.by_answer_median"] = byAnswer[len(byAnswer)/2]
	out["writes.handout.by_answer_max"] = byAnswer[len(byAnswer)-1]

	// The window: sequential hand-outs and everything they set off.
	if err := b.waitSettled(ctx, op, ns, 2*time.Minute); err != nil {
		return nil, err
	}
	before, err := b.quiet(ctx, op, 1500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	for range writesHandouts {
		l, _, pending, err := c.lease(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("hand-out in the writes window: %w", err)
		}
		if pending {
			out["writes.handout.pending"]++
			if err := c.waitBound(ctx, l.ID, time.Minute); err != nil {
				return nil, err
			}
		}
	}
	if err := b.waitSettled(ctx, op, ns, 2*time.Minute); err != nil {
		return nil, err
	}
	after, err := b.quiet(ctx, op, 2*time.Second)
	if err != nil {
		return nil, err
	}
	addWrites(out, "writes.handout.", after.sub(before), writesHandouts)
	return out, op.alive()
}

// addWrites records a window's writes per unit: total, each kind and, for
// hand-outs (not lease-and-release cycles, whose release writes the member
// too), critical path (by resource and verb, see criticalPath) and after
// the answer.
func addWrites(out figures, prefix string, d writeCounts, units int) {
	handouts := strings.HasPrefix(prefix, "writes.handout.")
	var critical, after float64
	for k, v := range d {
		switch {
		case notKobe(k):
			out[prefix+"not_kobe["+k.String()+"]"] = v / float64(units)
		case handouts && criticalPath(k):
			critical += v
			out[prefix+"per["+k.String()+"]"] = v / float64(units)
		default:
			after += v
			out[prefix+"per["+k.String()+"]"] = v / float64(units)
		}
	}
	if handouts {
		out[prefix+"critical"] = critical / float64(units)
		out[prefix+"after"] = after / float64(units)
	}
	out[prefix+"total"] = (critical + after) / float64(units)
	out[prefix+"units"] = float64(units)
}

// quiet waits until kube-apiserver has counted no write of kobe's for the
// given time and returns the write counters then.
func (b *bench) quiet(ctx context.Context, op *operator, quiet time.Duration) (writeCounts, error) {
	var (
		last    writeCounts
		lastSum float64
		since   time.Time
		moved   writeCounts
	)
	err := pollAlive(ctx, op, 2*time.Minute, func() error {
		w, err := b.metrics.writes(ctx)
		if err != nil {
			return err
		}
		var sum float64
		for k, v := range w {
			if !notKobe(k) {
				sum += v
			}
		}
		now := time.Now()
		if last == nil || sum != lastSum {
			if last != nil {
				moved = w.sub(last)
			}
			last, lastSum, since = w, sum, now
		}
		if now.Sub(since) >= quiet {
			return nil
		}
		return fmt.Errorf("kobe's writes still changing (%.0f so far; last change: %v)", sum, moved)
	})
	return last, err
}
