package leaseservice

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// activityWriteTimeout bounds one recording of a lease's activity.
const activityWriteTimeout = 10 * time.Second

// activityLog remembers, per lease of this process, the idle deadline it
// last wrote and whether a write is in flight, so that requests that come
// while the cache has not yet seen that write neither write again nor read
// the lease live.
type activityLog struct {
	mu      sync.Mutex
	entries map[types.UID]*activityEntry
}

type activityEntry struct {
	inFlight bool
	written  time.Time
}

// begin reports whether a recording of l's activity at now should start,
// and marks one in flight if so.
func (a *activityLog) begin(l *kobev1.ClusterLease, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.entries == nil {
		a.entries = map[types.UID]*activityEntry{}
	}
	e := a.entries[l.UID]
	if e == nil {
		e = &activityEntry{}
		a.entries[l.UID] = e
	}
	if e.inFlight {
		return false
	}
	if len(a.entries) > activityPruneAt {
		a.prune(now)
	}
	if !lease.ActivityWriteDue(l, e.written, now) {
		return false
	}
	e.inFlight = true
	return true
}

// activityPruneAt is the entry count above which entries of leases long
// past any idle timeout are dropped.
const activityPruneAt = 4096

// prune drops the entries whose last written deadline is a day and more
// behind now (longer than any idle timeout): leases that ended.
func (a *activityLog) prune(now time.Time) {
	for uid, e := range a.entries {
		if !e.inFlight && now.Sub(e.written) > 25*time.Hour {
			delete(a.entries, uid)
		}
	}
}

// end records the outcome of a recording: the deadline written, or the
// lease gone from activity (ended, or never to be written).
func (a *activityLog) end(uid types.UID, written time.Time, forget bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if forget {
		delete(a.entries, uid)
		return
	}
	if e := a.entries[uid]; e != nil {
		e.inFlight = false
		if written.After(e.written) {
			e.written = written
		}
	}
}

// RecordActivity notes a request through the connect proxy to l's member
// (l as the proxy read it from the cache). Nothing is written unless the
// request moves l's idle deadline by a grain (lease.RecordActivity); then
// the lease's status is updated in the background, off the request's path,
// one write per lease at a time.
func (s *Service) RecordActivity(l *kobev1.ClusterLease) {
	now := s.opts.Clock.Now()
	if _, ok := lease.IdleTimeout(l); !ok || !s.activity.begin(l, now) {
		return
	}
	key := client.ObjectKeyFromObject(l)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), activityWriteTimeout)
		defer cancel()
		var written time.Time
		forget := false
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur := &kobev1.ClusterLease{}
			if err := s.opts.APIReader.Get(ctx, key, cur); err != nil {
				return err
			}
			if cur.UID != l.UID || !lease.IsActive(cur) {
				forget = true
				return nil
			}
			if !lease.RecordActivity(cur, now) {
				written = lease.IdleDeadline(cur)
				return nil
			}
			if err := s.opts.Client.Status().Update(ctx, cur); err != nil {
				return err
			}
			written = cur.Status.IdleDeadline.Time
			return nil
		})
		if err != nil {
			s.opts.Log.Error(err, "Recording a lease's connect activity", "lease", l.Name)
		}
		s.activity.end(l.UID, written, forget || client.IgnoreNotFound(err) == nil && err != nil)
	}()
}
