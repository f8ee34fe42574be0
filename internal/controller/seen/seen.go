// Package seen remembers, per object name, the UID of an object a
// controller has finished a one-time step for (an audit record written, a
// finalizer removed), so that the reconciles a lagging cache still brings
// for it do not repeat the step's writes. Only an optimisation: the API
// holds the truth, and after a restart the step is tried once more and
// finds it done. A name re-created with another UID is another object.
package seen

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Set is safe for concurrent use; its zero value is empty and ready.
// Entries go when the controller forgets them (on NotFound), so it holds at
// most the objects that still exist.
type Set struct {
	mu   sync.Mutex
	uids map[types.NamespacedName]types.UID
}

// Has reports whether the object key names, with uid, was added.
func (s *Set) Has(key types.NamespacedName, uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.uids[key]
	return ok && got == uid
}

// Add records the object key names, with uid.
func (s *Set) Add(key types.NamespacedName, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uids == nil {
		s.uids = map[types.NamespacedName]types.UID{}
	}
	s.uids[key] = uid
}

// Forget drops what key names.
func (s *Set) Forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.uids, key)
}

// Len is how many objects are recorded.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uids)
}
