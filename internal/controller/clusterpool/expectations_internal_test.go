package clusterpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

func cached(names ...string) []kobev1.ClusterInstance {
	out := make([]kobev1.ClusterInstance, 0, len(names))
	for _, n := range names {
		out = append(out, kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return out
}

func TestExpectations(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var e expectations
	seen := func(p types.UID, cached []kobev1.ClusterInstance, now time.Time) bool {
		ok, _ := e.seen(p, cached, now)
		return ok
	}
	if !seen("p", nil, t0) {
		t.Fatal("a pool with no record must be seen")
	}
	e.expect("p", []string{"pool-p-3"}, []string{"pool-p-1"}, t0)
	if seen("p", cached("pool-p-1", "pool-p-2"), t0) {
		t.Error("the create of pool-p-3 is not in the cache yet: not seen")
	}
	if seen("p", cached("pool-p-1", "pool-p-2", "pool-p-3"), t0) {
		t.Error("pool-p-1, deleted, is still in the cache: not seen")
	}
	if !seen("other", nil, t0) {
		t.Error("another pool's record leaked into this one")
	}
	deleting := cached("pool-p-1", "pool-p-2", "pool-p-3")
	now := metav1.NewTime(t0)
	deleting[0].DeletionTimestamp = &now
	if !seen("p", deleting, t0) {
		t.Error("a member being deleted and a created one present: both seen")
	}
	if !seen("p", cached("pool-p-2"), t0) {
		t.Error("a record already satisfied must stay satisfied")
	}

	e.expect("p", []string{"pool-p-9"}, nil, t0)
	if ok, wait := e.seen("p", nil, t0.Add(cacheWait/4)); ok || wait != cacheWait*3/4 {
		t.Errorf("seen = %v, wait %v; want unseen, wait the rest of cacheWait (%v) for the cache", ok, wait, cacheWait*3/4)
	}
	if ok, wait := e.seen("p", nil, t0.Add(cacheWait)); ok || wait != 0 {
		t.Errorf("seen = %v, wait %v; want unseen with no wait once cacheWait is over, so that the pool lists live", ok, wait)
	}
	if !seen("p", nil, t0.Add(cacheWait+time.Second)) {
		t.Error("an expired record must be dropped after it was reported")
	}

	// After a live list, what the cache still lacks is waited for again:
	// a plan from the stale cache must not create pool-p-11 twice.
	e.lagging("p", cached("pool-p-2", "pool-p-5"), cached("pool-p-2", "pool-p-11"), t0)
	if ok, wait := e.seen("p", cached("pool-p-2", "pool-p-5"), t0); ok || wait != cacheWait {
		t.Errorf("seen = %v, wait %v; want the cache's lag (pool-p-11 created, pool-p-5 deleted) waited for", ok, wait)
	}
	if !seen("p", cached("pool-p-2", "pool-p-11"), t0) {
		t.Error("the cache caught up with the live list: seen")
	}
	e.lagging("p", cached("pool-p-2"), cached("pool-p-2"), t0)
	if !seen("p", cached("pool-p-2"), t0) {
		t.Error("a cache that agrees with the live list must leave nothing to wait for")
	}

	e.expect("p", []string{"pool-p-10"}, nil, t0)
	e.forget("p")
	if !seen("p", nil, t0) {
		t.Error("forget must drop the record")
	}
}
