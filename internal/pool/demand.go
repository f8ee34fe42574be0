package pool

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

const (
	// DefaultPredictiveWindow is how far back arrivals are measured when
	// scaling.predictiveWindow is unset.
	DefaultPredictiveWindow = time.Hour
	// DemandBuckets is how many buckets the window is cut into.
	DemandBuckets = 12
	// DemandCacheLag is how old a lease must be before it is counted: a
	// lease created in the same second as one already counted, but not yet
	// in the cache, would otherwise be skipped for good (creation
	// timestamps have a one-second resolution and countedThrough only moves
	// forward).
	DemandCacheLag = 2 * time.Second
	// provisionSamples is how many of the newest members' times to Ready
	// the median is taken over.
	provisionSamples = 10
)

// PredictiveWindow is the pool's demand window: scaling.predictiveWindow,
// else DefaultPredictiveWindow.
func PredictiveWindow(p *kobev1.ClusterPool) time.Duration {
	if s := p.Spec.Scaling; s != nil && s.PredictiveWindow != nil && s.PredictiveWindow.Duration > 0 {
		return s.PredictiveWindow.Duration
	}
	return DefaultPredictiveWindow
}

// MeasureDemand folds the pool's leases and members into its demand
// history (p.Status.Demand) and returns the new history and how soon it must
// be measured again (0: only when something changes). It returns nil for a
// pool without scaling. When nothing changed the result is semantically
// equal to p.Status.Demand, so a pool at rest does not rewrite its status.
//
// Leases are counted once, by creation time, into buckets of window/12
// aligned to the Unix epoch: those created after countedThrough and at
// least DemandCacheLag ago. A bucket is kept while any of it lies inside
// the window (its end after now - window), so every arrival counts for at
// least one whole window. warmTarget = ceil(peak bucket x provisionSeconds
// / bucketSeconds): the leases that arrive at the peak rate while one
// member is provisioned.
func MeasureDemand(p *kobev1.ClusterPool, leases []kobev1.ClusterLease, members []kobev1.ClusterInstance, now time.Time) (*kobev1.DemandStatus, time.Duration) {
	if p.Spec.Scaling == nil {
		return nil, 0
	}
	window := PredictiveWindow(p)
	width := max(int64(window/time.Second)/DemandBuckets, 1)
	prev := p.Status.Demand

	counts := map[int64]int32{}
	var counted time.Time // zero: nothing counted yet
	if prev != nil && prev.BucketSeconds > 0 {
		old := int64(prev.BucketSeconds)
		if width%old == 0 {
			// Same width, or wider buckets that old ones nest in exactly
			// (both are aligned to the epoch): re-bucket by summing.
			for _, b := range prev.Arrivals {
				counts[bucketStart(b.Start.Unix(), width)] += b.Count
			}
			if prev.CountedThrough != nil {
				counted = prev.CountedThrough.Time
			}
		}
		// Otherwise the window shrank or the widths do not nest: an old
		// bucket cannot be split without inventing when its leases came, so
		// the history restarts from the leases that still exist (those the
		// API has already forgotten are lost).
	}

	cutoff := now.Add(-DemandCacheLag)
	var requeue time.Duration
	newest := counted
	for i := range leases {
		l := &leases[i]
		created := l.CreationTimestamp.Time
		if l.Spec.Pool != p.Name || created.IsZero() || !created.After(counted) {
			continue
		}
		if created.After(cutoff) {
			requeue = shortest(requeue, created.Sub(cutoff))
			continue
		}
		if created.After(newest) {
			newest = created
		}
		counts[bucketStart(created.Unix(), width)]++
	}

	next := &kobev1.DemandStatus{Window: metav1.Duration{Duration: window}, BucketSeconds: int32(width)}
	if !newest.IsZero() {
		next.CountedThrough = &metav1.Time{Time: newest}
	}
	var peak int32
	for start, n := range counts {
		expires := time.Unix(start+width, 0).Add(window)
		if n <= 0 || !expires.After(now) {
			continue
		}
		next.Arrivals = append(next.Arrivals, kobev1.ArrivalBucket{Start: metav1.NewTime(time.Unix(start, 0).UTC()), Count: n})
		peak = max(peak, n)
		// The target must fall when the burst leaves the window, whether
		// or not anything else wakes the pool.
		requeue = shortest(requeue, expires.Sub(now))
	}
	slices.SortFunc(next.Arrivals, func(a, b kobev1.ArrivalBucket) int { return a.Start.Compare(b.Start.Time) })

	if secs, ok := provisionSeconds(members); ok {
		next.ProvisionSeconds = secs
	} else if prev != nil {
		next.ProvisionSeconds = prev.ProvisionSeconds
	}
	next.PeakArrivalsPerMinute = fmt.Sprintf("%.2f", float64(peak)*60/float64(width))
	if peak > 0 {
		next.WarmTarget = int32(ceilDiv(int64(peak)*int64(next.ProvisionSeconds), width))
	}
	return next, requeue
}

// bucketStart is the start, in Unix seconds, of the bucket of width
// seconds that holds t.
func bucketStart(t, width int64) int64 {
	start := t - t%width
	if t < 0 && t%width != 0 {
		start -= width
	}
	return start
}

// provisionSeconds is the median time to Ready of the newest
// provisionSamples members that have one, rounded up to the second (the safe
// side: a pool sized for slower provisioning is deeper); ok is false when
// none has one.
func provisionSeconds(members []kobev1.ClusterInstance) (secs int32, ok bool) {
	var timed []*kobev1.ClusterInstance
	for i := range members {
		if members[i].Status.TimeToReady != nil && members[i].Status.TimeToReady.Duration >= 0 {
			timed = append(timed, &members[i])
		}
	}
	if len(timed) == 0 {
		return 0, false
	}
	slices.SortFunc(timed, func(a, b *kobev1.ClusterInstance) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(b.Name, a.Name))
	})
	timed = timed[:min(len(timed), provisionSamples)]
	ds := make([]time.Duration, len(timed))
	for i, m := range timed {
		ds[i] = m.Status.TimeToReady.Duration
	}
	slices.Sort(ds)
	median := ds[len(ds)/2]
	if len(ds)%2 == 0 {
		median = (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
	}
	return int32(min(ceilDiv(int64(median), int64(time.Second)), 1<<31-1)), true
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// shortest is the shorter of two waits, where 0 means none.
func shortest(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
