package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls f with a recorder in its own goroutine (Fatalf ends it) and
// returns the failure message, "" when f passed.
func run(t *testing.T, f func(testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		testenv.Eventually(tb, 350*time.Millisecond, "the pool to fill", func() error {
			calls++
			return fmt.Errorf("ready %d of 2", calls)
		})
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Eventually took %s past a 350ms deadline", took)
	}
	if calls < 2 {
		t.Fatalf("condition ran %d times; want a retry", calls)
	}
	want := fmt.Sprintf("ready %d of 2", calls)
	if !strings.Contains(msg, "the pool to fill") || !strings.Contains(msg, want) || !strings.Contains(msg, "350ms") {
		t.Fatalf("failure %q; want what was awaited, the deadline and the last error %q", msg, want)
	}
}

func TestEventuallyPassesOnceTheConditionHolds(t *testing.T) {
	calls := 0
	msg := run(t, func(tb testing.TB) {
		testenv.Eventually(tb, 10*time.Second, "the third call", func() error {
			calls++
			if calls < 3 {
				return errors.New("not yet")
			}
			return nil
		})
	})
	if msg != "" || calls != 3 {
		t.Fatalf("failure %q after %d calls; want a pass on the third", msg, calls)
	}
}

func TestPollStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	sentinel := errors.New("member still Creating")
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	err := testenv.Poll(ctx, time.Minute, func() error { return sentinel })
	if !errors.Is(err, context.Canceled) || !errors.Is(err, sentinel) {
		t.Fatalf("Poll = %v; want the cancellation and the last error", err)
	}
}

func TestConsistentlyFailsWhenTheConditionBreaksMidWindow(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		testenv.Consistently(tb, 10*time.Second, "no member created", func() error {
			calls++
			if calls == 3 {
				return errors.New("member m-1 created")
			}
			return nil
		})
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Consistently took %s: it must fail at the first error, not at the window's end", took)
	}
	if calls != 3 {
		t.Fatalf("condition ran %d times; want a stop at the failing third call", calls)
	}
	if !strings.Contains(msg, "no member created") || !strings.Contains(msg, "member m-1 created") || !strings.Contains(msg, "10s") {
		t.Fatalf("failure %q; want what had to hold, the window and the error", msg)
	}
}

func TestConsistentlyPassesWhenTheConditionHoldsThroughout(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		testenv.Consistently(tb, 350*time.Millisecond, "no member created", func() error {
			calls++
			return nil
		})
	})
	if msg != "" {
		t.Fatalf("failure %q; want a pass", msg)
	}
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Fatalf("Consistently returned after %s, before its 350ms window ended", took)
	}
	if calls < 3 {
		t.Fatalf("condition ran %d times in 350ms; want a check every %s and one at the end", calls, testenv.PollInterval)
	}
}

func TestConsistentlyFailsAtTheWindowsEnd(t *testing.T) {
	start := time.Now()
	msg := run(t, func(tb testing.TB) {
		testenv.Consistently(tb, 250*time.Millisecond, "the lease to stay Pending", func() error {
			if time.Since(start) >= 250*time.Millisecond {
				return errors.New("lease Bound")
			}
			return nil
		})
	})
	if !strings.Contains(msg, "lease Bound") {
		t.Fatalf("failure %q; want the change at the window's end to be seen", msg)
	}
}
