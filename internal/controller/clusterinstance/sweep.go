package clusterinstance

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/metrics"
)

// SweepRunnable is a manager.Runnable that, once at start (on the leader,
// after the cache has synced), asks every backend that can find members
// nobody owns to destroy them: what a crash left behind between a
// ClusterInstance's deletion and its member's destruction, or before a
// member's object was ever written. Then, every Interval, it looks again and
// reports what it finds (a log line and kobe_leaked_members), destroying it
// only with RemoveLeaks: a leak found while the operator runs is a bug (or
// someone else's doing) that an administrator should see before anything
// is deleted.
//
// Ownership is judged from the ClusterInstances of Namespace alone, the
// namespace the operator manages (its rights are a Role there): a backend's
// leftovers are those of this installation, so its data (the local backend's
// data directory) must be this installation's own.
type SweepRunnable struct {
	Backends backend.Registry
	// Namespace is the operator's namespace; empty means every namespace,
	// for a test's manager that serves several.
	Namespace string
	// Reader lists ClusterInstances live (the manager's APIReader), so that
	// ownership is never judged from a cache.
	Reader client.Reader
	// Cache, when set, is waited for before sweeping.
	Cache interface {
		WaitForCacheSync(ctx context.Context) bool
	}
	// Interval between the periodic sweeps; 0 sweeps at start only.
	Interval time.Duration
	// RemoveLeaks makes the periodic sweeps destroy what they find, as the
	// start-up sweep does; otherwise they only report it.
	RemoveLeaks bool
}

// NeedLeaderElection: only the leader destroys anything.
func (s *SweepRunnable) NeedLeaderElection() bool { return true }

// Start sweeps once, then every Interval until ctx ends; a failed sweep is
// logged, not fatal: the next one sweeps again.
func (s *SweepRunnable) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("sweep")
	if s.Cache != nil && !s.Cache.WaitForCacheSync(ctx) {
		return nil // stopping
	}
	s.sweep(ctx, true)
	log.Info("Start-up sweep done", "namespace", s.Namespace)
	if s.Interval <= 0 {
		return nil
	}
	tick := time.NewTicker(s.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			s.sweep(ctx, s.RemoveLeaks)
		}
	}
}

// sweep asks every backend that can find members nobody owns to destroy
// them (remove) or to list them.
func (s *SweepRunnable) sweep(ctx context.Context, remove bool) {
	log := ctrl.LoggerFrom(ctx).WithName("sweep")
	owned, err := s.ownedFunc(ctx)
	if err != nil {
		log.Error(err, "Sweep skipped")
		return
	}
	names := make([]string, 0, len(s.Backends))
	for t := range s.Backends {
		names = append(names, string(t))
	}
	sort.Strings(names)
	for _, t := range names {
		b := s.Backends[kobev1.BackendType(t)]
		sw, canSweep := b.(backend.Sweeper)
		lf, canFind := b.(backend.LeakFinder)
		switch {
		case remove && canSweep:
			removed, err := sw.Sweep(ctx, owned)
			metrics.LeaksRemoved(t, len(removed))
			metrics.SetLeaks(t, 0)
			if err != nil {
				log.Error(err, "Sweep failed", "backend", t, "removed", removed)
				continue
			}
			if len(removed) > 0 {
				log.Info("Removed members nobody owns", "backend", t, "removed", removed)
			}
		case !remove && canFind:
			found, err := lf.Leaks(ctx, owned)
			if err != nil {
				log.Error(err, "Leak sweep failed", "backend", t, "found", found)
				continue
			}
			metrics.SetLeaks(t, len(found))
			if len(found) > 0 {
				log.Info("Found members nobody owns; start the operator with --leak-sweep-delete to remove them, or remove them by hand",
					"backend", t, "leaked", found)
			}
		}
	}
}

// ownedFunc returns owned(namespace, uid): a ClusterInstance with that UID
// exists, or the member is of a namespace this operator does not manage. It
// starts from one live list and lists again before answering "not owned", so
// that a member whose object was created after the first list (and whose
// data therefore appeared after it) is never taken for an orphan.
func (s *SweepRunnable) ownedFunc(ctx context.Context) (backend.OwnedFunc, error) {
	list := func() (map[types.UID]bool, error) {
		var l kobev1.ClusterInstanceList
		if err := s.Reader.List(ctx, &l, client.InNamespace(s.Namespace)); err != nil {
			return nil, fmt.Errorf("listing ClusterInstances (namespace %q): %w", s.Namespace, err)
		}
		uids := make(map[types.UID]bool, len(l.Items))
		for i := range l.Items {
			uids[l.Items[i].UID] = true
		}
		return uids, nil
	}
	known, err := list()
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	return func(namespace string, uid types.UID) bool {
		if s.Namespace != "" && namespace != s.Namespace {
			return true // another installation's member
		}
		mu.Lock()
		defer mu.Unlock()
		if known[uid] {
			return true
		}
		fresh, err := list()
		if err != nil {
			return true // when in doubt, keep
		}
		known = fresh
		return known[uid]
	}, nil
}
