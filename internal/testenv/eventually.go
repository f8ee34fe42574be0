package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// PollInterval is how often Eventually, Consistently and Poll check their
// condition.
const PollInterval = 100 * time.Millisecond

// Poll calls cond every PollInterval until it returns nil, ctx ends or within
// passes. The error then wraps cond's last error, so the caller sees the
// state the wait ended in, not only that it timed out.
func Poll(ctx context.Context, within time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last error // cond runs before the first wait, so it is set when read
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		if last = cond(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not within %s: %w", within, last)
			}
			return fmt.Errorf("%w; last: %w", ctx.Err(), last)
		case <-t.C:
		}
	}
}

// Eventually waits until cond returns nil and fails the test, naming what
// it waited for and cond's last error, when within passes or the test's
// context ends first. cond describes the state it saw in its error.
func Eventually(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(t.Context(), within, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Consistently checks cond every PollInterval for the whole of within, the
// end of the window included, and fails the test, naming what had to hold
// and cond's error, the first time cond returns one (or when the test's
// context ends first). It is the wait of a "nothing happens" check: a
// sleep followed by one look would miss a state that came and went.
func Consistently(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := hold(t.Context(), within, cond); err != nil {
		t.Fatalf("expecting %s for %s: %v", what, within, err)
	}
}

// hold calls cond every PollInterval until within passes, then once more,
// and returns cond's first error, saying when it came.
func hold(ctx context.Context, within time.Duration, cond func() error) error {
	start := time.Now()
	end := time.NewTimer(within)
	defer end.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for last := false; ; {
		if err := cond(); err != nil {
			return fmt.Errorf("failed after %s: %w", time.Since(start).Round(time.Millisecond), err)
		}
		if last {
			return nil
		}
		select {
		case <-end.C:
			last = true
		case <-ctx.Done():
			return fmt.Errorf("%w after %s of the window", ctx.Err(), time.Since(start).Round(time.Millisecond))
		case <-tick.C:
		}
	}
}
