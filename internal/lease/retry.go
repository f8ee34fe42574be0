package lease

import "time"

// Pacing of bind retries for a queued lease whose bind lost a race (the
// member it tried was taken meanwhile, or the lease changed under it).
const (
	// BindRetryFirst is the wait after the first lost race: a race usually
	// resolves once the cache has caught up.
	BindRetryFirst = 200 * time.Millisecond
	// BindRetryMax caps the wait; it equals the queue's periodic look.
	BindRetryMax = 30 * time.Second
)

// BindRetryAfter is how long a queued lease waits before it tries to bind
// again after its failures-th lost race in a row: BindRetryFirst, doubling
// with each further failure, never more than BindRetryMax.
func BindRetryAfter(failures int) time.Duration {
	if failures < 1 {
		failures = 1
	}
	d := BindRetryFirst
	for i := 1; i < failures && d < BindRetryMax; i++ {
		d *= 2
	}
	return min(d, BindRetryMax)
}
