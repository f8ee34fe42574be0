package leaseservice

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/auth"
)

// TestRequesterLocksAreForgotten: a mutex lives while someone holds or
// waits for it; after many distinct requesters the map is empty again.
func TestRequesterLocksAreForgotten(t *testing.T) {
	s := New(Options{})
	for i := range 1000 {
		unlock := s.lockRequester(&auth.Principal{Policy: "ci", Identity: fmt.Sprintf("run-%d", i)})
		if n := s.requesters.len(); n != 1 {
			t.Fatalf("while requester %d holds its lock: %d mutexes, want 1", i, n)
		}
		unlock()
		unlock() // a second call changes nothing
	}
	if n := s.requesters.len(); n != 0 {
		t.Fatalf("after 1000 requesters unlocked: %d mutexes kept, want 0", n)
	}
}

// TestRequesterLocksExclude: callers of one requester hold its lock one at
// a time, also while its entry is dropped and made again; callers of
// different requesters do not wait for each other.
func TestRequesterLocksExclude(t *testing.T) {
	var r requesterLocks
	const keys, workers, rounds = 3, 12, 300
	var inside [keys]atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				k := (w + i) % keys
				unlock := r.lock(fmt.Sprint(k))
				if n := inside[k].Add(1); n != 1 {
					t.Errorf("requester %d held by %d callers at once", k, n)
				}
				inside[k].Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	if n := r.len(); n != 0 {
		t.Fatalf("%d mutexes kept after every caller unlocked", n)
	}

	// Another requester's lock is free while one is held.
	unlockA := r.lock("a")
	defer unlockA()
	got := make(chan struct{})
	go func() {
		unlock := r.lock("b")
		unlock()
		close(got)
	}()
	<-got
}
