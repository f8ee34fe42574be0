//go:build bench

package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

const (
	writesHandouts       = 50 // hand-outs in the counted window
	writesSamples        = 12 // single hand-outs whose writes are read right after the answer
	writesLimitedSamples = 6  // the same for a caller whose rule sets maxConcurrentLeases
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
	if err := b.env.Client.Create(ctx, simPool(ns, pool, writesHandouts+writesSamples+writesLimitedSamples, time.Second)); err != nil {
		return nil, err
	}
	limited, err := b.limitedClient(ctx, op, ns)
	if err != nil {
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
		n, took, err := b.writesByAnswer(ctx, op, c, pool)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			// Not a fast-path hand-out: no sample.
			out["writes.handout.by_answer_pending"]++
			continue
		}
		byAnswer = append(byAnswer, n)
		isolated = append(isolated, took)
	}
	if len(byAnswer) == 0 {
		return nil, fmt.Errorf("every one of %d single hand-outs was answered Pending", writesSamples)
	}
	// A caller with a limit pays one more write, its ledger (docs/limits.md).
	var byAnswerLimited []float64
	for range writesLimitedSamples {
		n, _, err := b.writesByAnswer(ctx, op, limited, pool)
		if err != nil {
			return nil, err
		}
		if n >= 0 {
			byAnswerLimited = append(byAnswerLimited, n)
		}
	}
	if len(byAnswerLimited) > 0 {
		slices.Sort(byAnswerLimited)
		out["writes.handout_limited.by_answer_min"] = byAnswerLimited[0]
		out["writes.handout_limited.by_answer_median"] = byAnswerLimited[len(byAnswerLimited)/2]
		out["writes.handout_limited.by_answer_max"] = byAnswerLimited[len(byAnswerLimited)-1]
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
	addWrites(out, "writes.handout.", after.Sub(before), writesHandouts)
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
				moved = w.Sub(last)
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

// writesByAnswer leases once from pool with c, once kobe's writes have been
// quiet for 1.5 s, and returns the writes of kobe's counted by the time the
// answer arrived and the answer's latency; -1 writes when the lease was
// answered Pending (it is then waited for until Bound).
func (b *bench) writesByAnswer(ctx context.Context, op *operator, c *apiClient, pool string) (float64, time.Duration, error) {
	before, err := b.quiet(ctx, op, 1500*time.Millisecond)
	if err != nil {
		return 0, 0, err
	}
	l, took, pending, err := c.lease(ctx, pool)
	if err != nil {
		return 0, 0, fmt.Errorf("hand-out for the writes sample: %w", err)
	}
	after, err := b.metrics.writes(ctx)
	if err != nil {
		return 0, 0, err
	}
	if pending {
		return -1, took, c.waitBound(ctx, l.ID, time.Minute)
	}
	var n float64
	for k, v := range after.Sub(before) {
		if !notKobe(k) {
			n += v
		}
	}
	return n, took, nil
}

// limitedClient adds a token AccessPolicy to ns whose rule sets
// maxConcurrentLeases (high enough never to refuse the bench), and returns
// a client of it once the operator accepts its token.
func (b *bench) limitedClient(ctx context.Context, op *operator, ns string) (*apiClient, error) {
	token := b.token + "-limited"
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench-limited-token", Namespace: ns}, StringData: map[string]string{"token": token}},
		&kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench-limited", Namespace: ns}, Spec: kobev1.AccessPolicySpec{
			Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "bench-limited-token"}}},
			Identity: "bench-limited",
			Rules:    []kobev1.AccessRule{{Pools: []string{"*"}, MaxConcurrentLeases: ptr.To[int32](1000)}},
		}},
	} {
		if err := b.env.Client.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	c := b.client(op, 1)
	c.token = token
	err := pollAlive(ctx, op, time.Minute, func() error {
		code, body, err := c.do(ctx, http.MethodGet, "/v1/leases", nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("GET /v1/leases as the limited caller: %d %s", code, body)
		}
		return err
	})
	return c, err
}
