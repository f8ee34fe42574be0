// Package pacing remembers when this replica last wrote an object's status,
// so that a controller can hold back a change that may wait (a count, a
// queue position) instead of writing every observation. It is only a pacing
// aid: after a restart or a failover the first change is written at once.
package pacing

import (
	"sync"
	"time"
)

// Writes holds the last write time per object, keyed by K (a UID, or a
// namespaced name when the caller must also forget objects it can no
// longer read). The zero value is ready.
type Writes[K comparable] struct {
	mu   sync.Mutex
	last map[K]time.Time
}

// At is when the object was last written by this replica; zero when never
// (or forgotten).
func (w *Writes[K]) At(key K) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[key]
}

// Wrote records a write of the object at now.
func (w *Writes[K]) Wrote(key K, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[K]time.Time{}
	}
	w.last[key] = now
}

// Forget drops the object: call it when the object is gone or no longer
// paced, so that the map stays as small as what is paced.
func (w *Writes[K]) Forget(key K) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, key)
}

// Len is the number of objects remembered.
func (w *Writes[K]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.last)
}
