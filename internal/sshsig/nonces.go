package sshsig

import (
	"context"
	"sync"
	"time"
)

// DefaultMaxNonces bounds a MemoryNonceStore.
const DefaultMaxNonces = 100_000

// MemoryNonceStore is a NonceStore in one process's memory: enough for a
// single server and for tests. Servers that run as several replicas need a
// shared store (see package replay).
type MemoryNonceStore struct {
	max int
	now func() time.Time

	mu        sync.Mutex
	seen      map[string]time.Time // id -> when it may be forgotten
	lastSweep time.Time
}

// NewMemoryNonceStore returns a store of at most max live nonces
// (DefaultMaxNonces when max <= 0) on the clock now (time.Now when nil).
func NewMemoryNonceStore(max int, now func() time.Time) *MemoryNonceStore {
	if max <= 0 {
		max = DefaultMaxNonces
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryNonceStore{max: max, now: now, seen: map[string]time.Time{}}
}

// Claim records id until expires; see NonceStore. Expired entries are swept
// when the store is full or once a minute.
func (s *MemoryNonceStore) Claim(_ context.Context, id string, expires time.Time) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if exp, ok := s.seen[id]; ok && !now.After(exp) {
		return ErrReplayed
	}
	if len(s.seen) >= s.max || now.Sub(s.lastSweep) >= time.Minute {
		s.sweep(now)
	}
	if len(s.seen) >= s.max {
		return ErrBusy
	}
	s.seen[id] = expires
	return nil
}

func (s *MemoryNonceStore) sweep(now time.Time) {
	s.lastSweep = now
	for id, exp := range s.seen {
		if now.After(exp) {
			delete(s.seen, id)
		}
	}
}

// Len is the number of recorded nonces, expired ones included until swept.
func (s *MemoryNonceStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}
