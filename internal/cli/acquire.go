package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// errWaitTimeout is returned by acquire when the lease was not bound within
// the wait timeout (the lease was released).
var errWaitTimeout = errors.New("wait timed out")

// acquire asks for a lease and, unless noWait, waits until it is Bound,
// telling progress on progress. When waiting fails for any reason (timeout,
// Ctrl-C, the lease ended) the lease is released so that nothing leaks, and
// the error says so. It returns the lease as last seen.
func acquire(ctx context.Context, c *apiclient.Client, req wire.CreateLeaseRequest, noWait bool, waitTimeout time.Duration, progress io.Writer) (*wire.Lease, error) {
	l, err := c.CreateLease(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasing from pool %s: %w", req.Pool, err)
	}
	if l.Phase == wire.PhaseBound || noWait {
		return l, nil
	}
	if wire.PhaseEnded(l.Phase) {
		return l, &apiclient.LeaseEndedError{Lease: l}
	}

	waitCtx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	// A queued lease with a heartbeat timeout needs its beats while it
	// waits as much as once bound.
	if d := leaseHeartbeat(l); d > 0 {
		beats, stop := context.WithCancel(waitCtx)
		done := make(chan struct{})
		go func() { _ = keepAlive(beats, c, l.ID, heartbeatInterval(d), progress); close(done) }()
		defer func() { stop(); <-done }()
	}
	bound, err := c.WaitBound(waitCtx, l.ID, func(p *wire.Lease) {
		if p.Phase == wire.PhasePending {
			warnf(progress, "Waiting for a cluster: lease %s is number %d in pool %s's queue\n", p.ID, p.QueuePosition, p.Pool)
		}
	})
	if err == nil {
		return bound, nil
	}

	var ended *apiclient.LeaseEndedError
	if errors.As(err, &ended) {
		return ended.Lease, err
	}
	releaseErr := releaseDetached(ctx, c, l.ID)
	switch {
	case ctx.Err() != nil:
		err = context.Cause(ctx)
		if releaseErr == nil {
			return l, fmt.Errorf("lease %s was still Pending; released it: %w", l.ID, err)
		}
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("lease %s was not bound within --wait-timeout %s: %w", l.ID, humanDuration(waitTimeout), errWaitTimeout)
		if releaseErr == nil {
			return l, fmt.Errorf("%w; released it so nothing leaks: try again later or raise --wait-timeout", err)
		}
	default:
		if releaseErr == nil {
			return l, fmt.Errorf("%w; released lease %s", err, l.ID)
		}
	}
	return l, fmt.Errorf("%w; and %w: it ends on its own at its TTL, or run `kobe release %s`", err, releaseErr, l.ID)
}
