package leaseservice

import "sync"

// requesterLocks holds one mutex per requester while someone holds or waits
// for it, and forgets it when the last one unlocks: identities made of
// per-run claims would otherwise grow the map forever. Unlike a striped
// array, two requesters never wait for each other.
type requesterLocks struct {
	mu    sync.Mutex
	locks map[string]*requesterLock
}

type requesterLock struct {
	sync.Mutex
	// refs counts holders and waiters; guarded by requesterLocks.mu.
	refs int
}

// lock locks key's mutex and returns its unlock, to be called once.
func (r *requesterLocks) lock(key string) (unlock func()) {
	r.mu.Lock()
	if r.locks == nil {
		r.locks = map[string]*requesterLock{}
	}
	l := r.locks[key]
	if l == nil {
		l = &requesterLock{}
		r.locks[key] = l
	}
	l.refs++
	r.mu.Unlock()

	l.Lock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.Unlock()
			r.mu.Lock()
			defer r.mu.Unlock()
			if l.refs--; l.refs == 0 {
				delete(r.locks, key)
			}
		})
	}
}

// len is the number of requesters with a mutex (tests).
func (r *requesterLocks) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.locks)
}
