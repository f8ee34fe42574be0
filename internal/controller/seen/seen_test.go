package seen

import (
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestSet(t *testing.T) {
	var s Set
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	if s.Has(key, "u1") {
		t.Fatal("an empty set has an entry")
	}
	s.Add(key, "u1")
	if !s.Has(key, "u1") {
		t.Error("an added object is not there")
	}
	if s.Has(key, "u2") {
		t.Error("a re-created object (another UID) counts as seen")
	}
	if s.Has(types.NamespacedName{Namespace: "other", Name: "a"}, "u1") {
		t.Error("the same name in another namespace counts as seen")
	}
	s.Forget(key)
	if s.Has(key, "u1") || s.Len() != 0 {
		t.Errorf("a forgotten object is still there (len %d)", s.Len())
	}
}

func TestSetConcurrent(t *testing.T) {
	var s Set
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := types.NamespacedName{Name: string(rune('a' + i))}
			for range 100 {
				s.Add(key, "u")
				_ = s.Has(key, "u")
				s.Forget(key)
			}
		}()
	}
	wg.Wait()
	if s.Len() != 0 {
		t.Errorf("%d entries left", s.Len())
	}
}
