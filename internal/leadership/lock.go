// Package leadership tells a leader-only step whether this replica still
// surely leads. client-go's leader elector lets a leader act until its
// renewal has failed for the whole renew deadline; a leader whose process
// was paused (SIGSTOP, a frozen VM, a long GC stall) resumes believing it
// leads while another replica, having waited out the lease, already does.
// For up to a renew deadline both would bind, end and destroy. Lock records
// when this replica last renewed its lease, so that leader-only steps can
// hold back once that is too long ago to be sure.
package leadership

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// Checker is what a leader-only step asks before it acts.
type Checker interface {
	// Certain reports whether no other replica can have taken over yet.
	Certain() bool
}

// Certain is c.Certain(), true for a nil c: without leader election (one
// replica, a test) nobody else acts.
func Certain(c Checker) bool {
	return c == nil || c.Certain()
}

// Recheck is how soon a step held back by an uncertain leadership looks
// again: by then this replica has renewed, or its elector has given up and
// the process exits.
const Recheck = time.Second

// Lock is the election's resource lock that remembers its last renewal. It
// is a resourcelock.Interface for ctrl.Options.LeaderElectionResourceLockInterface
// and a Checker.
type Lock struct {
	resourcelock.Interface
	// Window is how long after a renewal was sent this replica is sure
	// nobody else leads. Another replica takes over only once it has seen
	// the record unchanged for the lease duration, so anything up to that
	// is safe; the renew deadline leaves a leader-only step started just
	// before the window closes the rest of the lease to finish.
	Window time.Duration
	// Clock is read with its monotonic reading; clock.RealClock{} when nil.
	Clock clock.PassiveClock

	mu sync.Mutex
	// renewed is when the last write of this replica's own record that
	// succeeded was sent (the acquisition or a renewal).
	renewed time.Time
}

// Create acquires the lock for the first time.
func (l *Lock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := l.now()
	err := l.Interface.Create(ctx, r)
	l.record(err, r, sent)
	return err
}

// Update acquires or renews the lock (or, with no holder, releases it).
func (l *Lock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	sent := l.now()
	err := l.Interface.Update(ctx, r)
	l.record(err, r, sent)
	return err
}

// record keeps sent as the last renewal when the write succeeded and named
// this replica; a release (no holder) ends certainty at once.
func (l *Lock) record(err error, r resourcelock.LeaderElectionRecord, sent time.Time) {
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.HolderIdentity == l.Identity() && r.HolderIdentity != "" {
		l.renewed = sent
	} else {
		l.renewed = time.Time{}
	}
}

// Certain reports whether this replica renewed its lease less than Window
// ago.
func (l *Lock) Certain() bool {
	l.mu.Lock()
	renewed := l.renewed
	l.mu.Unlock()
	return !renewed.IsZero() && l.now().Sub(renewed) < l.Window
}

func (l *Lock) now() time.Time {
	if l.Clock == nil {
		return time.Now()
	}
	return l.Clock.Now()
}
