package clusterpool

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// cacheWait bounds how long a pool waits for the cache to show a create or
// delete this process made before it acts on a live list instead. A
// watch shows them within milliseconds; a member created and gone again
// before the pool looked would otherwise hold it back much longer.
const cacheWait = time.Second

// expectationTTL bounds how long the host ledger counts a member this
// process created that the cache does not show (hostLedger.unseen).
const expectationTTL = 30 * time.Second

// expectations remember, per pool, the members this process created or
// deleted until the cache shows it. While none is pending, the cache holds
// every member this leader's own writes made or removed, and a plan made
// from it can be acted on without a live list: a live list of a pool's
// members cost kube-apiserver a full encode of every member on every
// hand-out's refill. It is a guard against cache lag only; nothing is lost
// with it: a new leader starts with an empty record and a freshly synced
// cache.
type expectations struct {
	mu    sync.Mutex
	pools map[types.UID]*pending
}

type pending struct {
	created map[string]bool
	deleted map[string]bool
	since   time.Time
}

// expect records members of pool p created and deleted at now.
func (e *expectations) expect(p types.UID, created, deleted []string, now time.Time) {
	if len(created) == 0 && len(deleted) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pools == nil {
		e.pools = map[types.UID]*pending{}
	}
	pd := e.pools[p]
	if pd == nil {
		pd = &pending{created: map[string]bool{}, deleted: map[string]bool{}}
		e.pools[p] = pd
	}
	for _, n := range created {
		pd.created[n] = true
	}
	for _, n := range deleted {
		pd.deleted[n] = true
	}
	pd.since = now
}

// seen reports whether cached shows every create and delete recorded for
// pool p, forgetting those it shows. When it does not, wait is how much
// longer to wait for the cache (the record's last write plus cacheWait);
// once that is over the record is dropped and reported unseen with no
// wait, once, so that the caller lists live.
func (e *expectations) seen(p types.UID, cached []kobev1.ClusterInstance, now time.Time) (ok bool, wait time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pd := e.pools[p]
	if pd == nil {
		return true, 0
	}
	present := make(map[string]bool, len(cached))
	for i := range cached {
		// A member being deleted counts as deleted: its delete was seen.
		present[cached[i].Name] = cached[i].DeletionTimestamp.IsZero()
	}
	for n := range pd.created {
		if _, ok := present[n]; ok {
			delete(pd.created, n)
		}
	}
	for n := range pd.deleted {
		if !present[n] {
			delete(pd.deleted, n)
		}
	}
	if len(pd.created) == 0 && len(pd.deleted) == 0 {
		delete(e.pools, p)
		return true, 0
	}
	if left := pd.since.Add(cacheWait).Sub(now); left > 0 {
		return false, left
	}
	delete(e.pools, p)
	return false, 0
}

// lagging records, after a live list, what the cache still lacks of it:
// members the live list shows and the cache does not (created) and members
// the cache shows and the live list does not (deleted). The next plans made
// from the cache then wait for it again instead of repeating those creates:
// under heavy load (make bench's scale fill with 32 pool workers) the cache
// lagged more than cacheWait, the dropped record let the next reconcile
// plan from the stale cache, and pools created 12,051 members for 10,000
// and deleted the surplus.
func (e *expectations) lagging(p types.UID, cached, live []kobev1.ClusterInstance, now time.Time) {
	inCache := make(map[string]bool, len(cached))
	for i := range cached {
		inCache[cached[i].Name] = true
	}
	inLive := make(map[string]bool, len(live))
	var created, deleted []string
	for i := range live {
		inLive[live[i].Name] = true
		if !inCache[live[i].Name] {
			created = append(created, live[i].Name)
		}
	}
	for n := range inCache {
		if !inLive[n] {
			deleted = append(deleted, n)
		}
	}
	e.expect(p, created, deleted, now)
}

// forget drops pool p's record (the pool is gone).
func (e *expectations) forget(p types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pools, p)
}
