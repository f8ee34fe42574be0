// Package ownwrites lets a controller wait for its own last write of an
// object to reach its cache before it decides about that object again.
//
// A reconcile that a lagging cache starts (another watch's event, a
// requeue) reads the object as it was before this controller's last write,
// decides the same change again and sends it, fenced by a resourceVersion
// the server has moved past: a 409 kube-apiserver still serves (make bench
// counted 0.2-0.3 of them per lease-and-release cycle on members), then a
// requeue. Tracker remembers the resourceVersion of the last write per
// object; the informer's event handler (Predicate) marks it seen; until
// then, or until MaxWait passed, Behind asks the reconcile to wait. It is
// only an optimisation: the writes stay fenced, and a restart forgets it.
// This is the "expectations" idea of Kubernetes' own workload controllers.
package ownwrites

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// DefaultMaxWait bounds how long a reconcile waits for its own write: an
// informer that relisted may never show that exact resourceVersion. It is
// what a conflict costs anyway (patch.StaleRequeue).
const DefaultMaxWait = time.Second

// Tracker is safe for concurrent use. Its zero value is not: use New. A nil
// Tracker records nothing and never waits (a reconciler driven without its
// manager, in a test).
type Tracker struct {
	clock   clock.PassiveClock
	maxWait time.Duration

	mu      sync.Mutex
	pending map[types.NamespacedName]write
	// delivered is the resourceVersion of each object's last event: a
	// write whose event came before the writer recorded it is not waited
	// for.
	delivered map[types.NamespacedName]string
}

type write struct {
	rv string
	at time.Time
}

// New returns a Tracker on clk; maxWait <= 0 means DefaultMaxWait.
func New(clk clock.PassiveClock, maxWait time.Duration) *Tracker {
	if maxWait <= 0 {
		maxWait = DefaultMaxWait
	}
	return &Tracker{clock: clk, maxWait: maxWait, pending: map[types.NamespacedName]write{}, delivered: map[types.NamespacedName]string{}}
}

// Wrote records that this controller wrote the object key names, which
// the server answered with resourceVersion rv.
func (t *Tracker) Wrote(key types.NamespacedName, rv string) {
	if t == nil || rv == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.delivered[key] == rv {
		return
	}
	t.pending[key] = write{rv: rv, at: t.clock.Now()}
}

// Forget drops what is recorded of key (the object is gone).
func (t *Tracker) Forget(key types.NamespacedName) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pending, key)
	delete(t.delivered, key)
}

// Behind reports how long to wait before deciding about key, read from the
// cache at resourceVersion cachedRV: > 0 while this controller's last
// write of it has not reached the cache, and for at most MaxWait after it.
func (t *Tracker) Behind(key types.NamespacedName, cachedRV string) time.Duration {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.pending[key]
	if !ok {
		return 0
	}
	left := w.at.Add(t.maxWait).Sub(t.clock.Now())
	if w.rv == cachedRV || left <= 0 {
		delete(t.pending, key)
		return 0
	}
	return left
}

// observed marks key's event at resourceVersion rv as delivered: the
// cache holds rv or something newer from now on.
func (t *Tracker) observed(key types.NamespacedName, rv string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.delivered[key] = rv
	if w, ok := t.pending[key]; ok && w.rv == rv {
		delete(t.pending, key)
	}
}

// Predicate is an event filter for the controller's own kind that lets
// every event through and marks, on the way, the writes it delivers. The
// informer hands events over in order, so once a write's event passed, no
// older copy is read from the cache again.
func (t *Tracker) Predicate() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			t.observed(client.ObjectKeyFromObject(e.Object), e.Object.GetResourceVersion())
			return true
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			t.observed(client.ObjectKeyFromObject(e.ObjectNew), e.ObjectNew.GetResourceVersion())
			return true
		},
		DeleteFunc:  func(e event.DeleteEvent) bool { t.Forget(client.ObjectKeyFromObject(e.Object)); return true },
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}
