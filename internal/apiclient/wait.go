package apiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// waitBackoff paces WaitBound's polls: 0.5s, growing by half each poll, at
// most 5s apart.
var waitBackoff = wait.Backoff{
	Duration: 500 * time.Millisecond,
	Factor:   1.5,
	Jitter:   0.1,
	Steps:    math.MaxInt32,
	Cap:      5 * time.Second,
}

// defaultLeaseWait is how long each of WaitBound's polls asks the server to
// hold its answer while the lease is Pending: the answer comes as soon as
// the lease is bound, rather than at the next poll.
const defaultLeaseWait = 15 * time.Second

// leaseWaitFor is defaultLeaseWait, or half of a shorter exchange timeout
// (timeout; 0 is none) so that a held answer still arrives within it.
func leaseWaitFor(timeout time.Duration) time.Duration {
	if timeout > 0 && timeout < 2*defaultLeaseWait {
		return timeout / 2
	}
	return defaultLeaseWait
}

// WaitBound polls GET /v1/leases/{id} until the lease is Bound and returns
// it (with its kubeconfig). Each poll asks the server to hold its answer
// while the lease is Pending (wire.LeaseWaitParam); one that held it the
// whole time is followed by the next at once, one that answered at once (a
// server that does not wait, or that has too many waiting) by the backoff. onProgress, when not nil, is called
// with the first answer and with every answer whose phase or queue position
// changed. It fails with a *LeaseEndedError when the lease ends instead, with
// the API's *Error on answers that retrying cannot fix (401, 403, 404, 400),
// and with ctx's error (wrapping the last transient failure, if any) when ctx
// ends first. Network errors, 429 and 5xx answers are retried.
func (c *Client) WaitBound(ctx context.Context, id string, onProgress func(*wire.Lease)) (*wire.Lease, error) {
	var (
		bound   *wire.Lease
		last    *wire.Lease
		lastErr error
	)
	err := c.pollBackoff.DelayFunc().Until(ctx, true, false, func(ctx context.Context) (bool, error) {
		for {
			asked := c.now()
			l, err := c.getLease(ctx, id, c.leaseWait)
			if err != nil {
				if ctx.Err() == nil && retryable(err) {
					lastErr = err
					return false, nil
				}
				return false, err
			}
			lastErr = nil
			if onProgress != nil && (last == nil || last.Phase != l.Phase || last.QueuePosition != l.QueuePosition) {
				onProgress(l)
			}
			last = l
			switch {
			case l.Phase == wire.PhaseBound:
				bound = l
				return true, nil
			case wire.PhaseEnded(l.Phase):
				return false, &LeaseEndedError{Lease: l}
			case c.leaseWait <= 0 || c.now().Sub(asked) < c.leaseWait*9/10:
				return false, nil // answered without waiting: back off
			}
			// The server held the answer the whole wait: ask again now.
		}
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			if lastErr != nil {
				return nil, fmt.Errorf("waiting for lease %s to be bound: %w (last error: %w)", id, ctxErr, lastErr)
			}
			return nil, fmt.Errorf("waiting for lease %s to be bound: %w", id, ctxErr)
		}
		return nil, err
	}
	return bound, nil
}

// retryable reports whether a failed poll is worth repeating.
func retryable(err error) bool {
	var credErr *credentialsError
	if errors.As(err, &credErr) {
		return false
	}
	var apiErr *Error
	if !errors.As(err, &apiErr) {
		// Connection refused, reset or timed out: the server may be
		// restarting. Credential, TLS and decoding failures are not retried.
		var netErr net.Error
		return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
	}
	return apiErr.StatusCode == http.StatusTooManyRequests || apiErr.StatusCode >= 500
}
