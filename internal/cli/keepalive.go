package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// defaultRunHeartbeat is `kobe run`'s --heartbeat-timeout: a runner killed
// hard (OOM, a preempted VM) frees its cluster within it instead of at the
// lease's TTL.
const defaultRunHeartbeat = 5 * time.Minute

// heartbeatInterval is how often a holder beats for a lease with timeout:
// six beats per timeout, so that losing one or two to a slow network never
// ends the lease. The server records one in two or three (a write per
// quarter timeout at most, lease.HeartbeatGrain).
func heartbeatInterval(timeout time.Duration) time.Duration {
	return max(timeout/6, time.Second)
}

// validateHeartbeat checks a --heartbeat-timeout flag: 0 (none) or 10s-24h.
func validateHeartbeat(flag string, d time.Duration) error {
	if d != 0 && (d < wire.MinHeartbeatTimeout || d > wire.MaxHeartbeatTimeout) {
		return fmt.Errorf("%s %s: must be 0 (no heartbeats) or between %s and %s", flag, d, wire.MinHeartbeatTimeout, wire.MaxHeartbeatTimeout)
	}
	return nil
}

// formatHeartbeat renders a timeout for the request ("" for none).
func formatHeartbeat(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return wire.FormatTTL(d)
}

// leaseHeartbeat is l's heartbeat timeout as the server resolved it (the
// request's, the pool's default or the policy's cap), 0 for none: whoever
// holds the lease in the foreground beats whenever it is set, whatever was
// asked.
func leaseHeartbeat(l *wire.Lease) time.Duration {
	if l == nil || l.HeartbeatTimeout == "" {
		return 0
	}
	d, err := time.ParseDuration(l.HeartbeatTimeout)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// errLeaseEnded is keepAlive's error when the server says the lease is over.
var errLeaseEnded = errors.New("the lease has ended")

// keepAlive sends lease id's heartbeats every interval until ctx ends, and
// returns nil then. A beat the server refuses because the lease is over
// (410, 404, 409) ends it with errLeaseEnded; other failures (the network,
// a 5xx) are warned about and retried at the next beat: the timeout is
// several intervals long.
func keepAlive(ctx context.Context, c *apiclient.Client, id string, interval time.Duration, warn io.Writer) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, interval)
		_, err := c.Heartbeat(bctx, id)
		cancel()
		var apiErr *apiclient.Error
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.As(err, &apiErr) && (apiErr.StatusCode == http.StatusGone || apiErr.StatusCode == http.StatusNotFound || apiErr.StatusCode == http.StatusConflict):
			return fmt.Errorf("%w: %w", errLeaseEnded, err)
		default:
			warnf(warn, "kobe: warning: heartbeat of lease %s failed (retrying in %s): %v\n", id, interval, err)
		}
	}
}
