//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	heartbeatLeases   = 20               // leases beating at once
	heartbeatTimeout  = 20 * time.Second // their heartbeat timeout (grain 5 s)
	heartbeatInterval = time.Second      // each beats this often: far more than it needs
	heartbeatWindow   = 40 * time.Second // two timeouts
)

// measureHeartbeats: heartbeatLeases Bound leases with a heartbeat timeout
// beat every heartbeatInterval for heartbeatWindow, through the API. It
// counts kobe's API writes in the window (from kube-apiserver's own
// counters) per beat, which the grain keeps far below one, and the beats'
// latency. Every lease must still be Bound at the end.
func measureHeartbeats(ctx context.Context, b *bench, _ int) (figures, error) {
	ns, op, err := b.operatorIn(ctx, "heartbeat")
	if err != nil {
		return nil, err
	}
	defer op.stop()
	const pool = "heartbeat"
	if err := b.env.Client.Create(ctx, simPool(ns, pool, heartbeatLeases, time.Second)); err != nil {
		return nil, err
	}
	if err := b.waitSettled(ctx, op, ns, 3*time.Minute); err != nil {
		return nil, err
	}
	c := b.client(op, heartbeatLeases)
	body := fmt.Sprintf(`{"pool":%q,"ttl":"30m","heartbeat_timeout":%q}`, pool, wire.FormatTTL(heartbeatTimeout))
	ids := make([]string, 0, heartbeatLeases)
	for range heartbeatLeases {
		code, resp, err := c.do(ctx, http.MethodPost, "/v1/leases", []byte(body))
		if err != nil {
			return nil, err
		}
		var l wire.Lease
		if err := json.Unmarshal(resp, &l); err != nil || code != http.StatusCreated || l.HeartbeatTimeout == "" {
			return nil, fmt.Errorf("POST /v1/leases with a heartbeat timeout: %d %s", code, resp)
		}
		ids = append(ids, l.ID)
	}
	before, err := b.quiet(ctx, op, 1500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		took     []time.Duration
		failures []error
		wg       sync.WaitGroup
	)
	end := time.Now().Add(heartbeatWindow)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(heartbeatInterval)
			defer t.Stop()
			for time.Now().Before(end) {
				start := time.Now()
				code, resp, err := c.do(ctx, http.MethodPost, "/v1/leases/"+id+"/heartbeat", nil)
				d := time.Since(start)
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err)
				case code != http.StatusOK:
					failures = append(failures, fmt.Errorf("heartbeat of %s: %d %s", id, code, resp))
				default:
					took = append(took, d)
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
	after, err := b.metrics.writes(ctx)
	if err != nil {
		return nil, err
	}
	if len(failures) > 0 {
		return nil, fmt.Errorf("%d of %d heartbeats failed, first: %w", len(failures), len(failures)+len(took), failures[0])
	}
	var writes float64
	for k, v := range after.Sub(before) {
		if !notKobe(k) {
			writes += v
		}
	}
	for _, id := range ids {
		code, resp, err := c.do(ctx, http.MethodGet, "/v1/leases/"+id, nil)
		var l wire.Lease
		if err == nil {
			err = json.Unmarshal(resp, &l)
		}
		if err != nil || code != http.StatusOK || l.Phase != wire.PhaseBound {
			return nil, fmt.Errorf("lease %s after %s of heartbeats: %d %s (%w)", id, heartbeatWindow, code, resp, err)
		}
		if err := c.release(ctx, id); err != nil {
			return nil, err
		}
	}
	out := figures{
		"heartbeat.leases":   heartbeatLeases,
		"heartbeat.beats":    float64(len(took)),
		"heartbeat.writes":   writes,
		"heartbeat.per_beat": writes / float64(len(took)),
		// What the grain allows: one write per lease per quarter timeout.
		"heartbeat.grain_bound": float64(heartbeatLeases) * (heartbeatWindow.Seconds()/(heartbeatTimeout.Seconds()/4) + 1),
	}
	p := percentiles(took, 0.5, 0.99)
	out["heartbeat.p50_ms"], out["heartbeat.p99_ms"] = p[0], p[1]
	return out, op.alive()
}
