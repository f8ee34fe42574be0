package clusterlease

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// Bind failure reasons, logged with every failed bind.
const (
	// bindLostRace: the members the cache showed were taken meanwhile, or
	// the lease changed under the binder.
	bindLostRace = "LostRace"
	// bindRefused: the API server refused a write of the binding.
	bindRefused = "APIServerRefused"
	// bindUncertain: a member claim may or may not have landed; the next
	// try looks for it, live, before claiming again.
	bindUncertain = "OutcomeUnknown"
	// bindUnsupported: the lease asks for something no backend can do.
	bindUnsupported = "CleanupModeUnsupported"
)

// bindLogAfter is how many lost races in a row are logged at debug level
// only; from then on each one is logged with its reason.
const bindLogAfter = 3

// bindFailuresForget: a failure further than this after the previous one of
// the same lease starts a new run.
const bindFailuresForget = 2 * lease.BindRetryMax

// bindRetry is what a failed bind leads to.
type bindRetry struct {
	// Reason is why the bind failed: one of the bind* reasons.
	Reason string
	// Wait is how long the lease does not try to bind again. It holds even
	// when the lease's own writes (the binder's claim and roll-back) wake
	// the controller sooner, which is what keeps a failing bind from looping.
	Wait time.Duration
	// Err, when set, is returned to controller-runtime, which logs it.
	Err error
	// Loud says a lost race is logged at the default level, not debug.
	Loud bool
}

// decideBindRetry decides what follows the failures-th failed bind of a
// lease in a row. Every failure waits lease.BindRetryAfter (200ms, then
// doubling up to 30s) before the next try. A lost race is logged at debug
// level at first and at the default level once it keeps happening; any other
// failure is returned as an error, so that it is logged with its reason; a
// lease that no backend can serve is not retried at all.
func decideBindRetry(err error, failures int) bindRetry {
	wait := lease.BindRetryAfter(failures)
	switch {
	case binding.LostRace(err):
		return bindRetry{Reason: bindLostRace, Wait: wait, Loud: failures >= bindLogAfter}
	case errors.Is(err, binding.ErrUncertain):
		return bindRetry{Reason: bindUncertain, Wait: wait, Err: fmt.Errorf("%s: %w", bindUncertain, err)}
	case errors.Is(err, lease.ErrCleanupModeUnsupported):
		return bindRetry{Reason: bindUnsupported, Err: reconcile.TerminalError(fmt.Errorf("%s: %w", bindUnsupported, err))}
	default:
		return bindRetry{Reason: bindRefused, Wait: wait, Err: fmt.Errorf("%s: %w", bindRefused, err)}
	}
}

// bindFailures remembers each queued lease's failed binds in a row and when
// it may try again. It only paces retries: losing it (a restart) retries a
// little sooner, nothing more. The zero value is ready to use.
type bindFailures struct {
	mu sync.Mutex
	m  map[types.NamespacedName]bindFailure
}

type bindFailure struct {
	count   int
	last    time.Time
	retryAt time.Time
}

// add records a failed bind of key at now and returns how many failed in a
// row; a failure more than bindFailuresForget after the previous one starts
// a new run.
func (f *bindFailures) add(key types.NamespacedName, now time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[types.NamespacedName]bindFailure{}
	}
	prev := f.m[key]
	if now.Sub(prev.last) > bindFailuresForget {
		prev.count = 0
	}
	f.m[key] = bindFailure{count: prev.count + 1, last: now, retryAt: now}
	return prev.count + 1
}

// hold keeps key from trying to bind until now+wait.
func (f *bindFailures) hold(key types.NamespacedName, now time.Time, wait time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.m[key]; ok {
		e.retryAt = now.Add(wait)
		f.m[key] = e
	}
}

// waitLeft is how long key must still wait before its next bind.
func (f *bindFailures) waitLeft(key types.NamespacedName, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.m[key]; ok && e.retryAt.After(now) {
		return e.retryAt.Sub(now)
	}
	return 0
}

// forget drops key: it bound, ended or is gone.
func (f *bindFailures) forget(key types.NamespacedName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}
