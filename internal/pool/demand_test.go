package pool

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// demandT0 starts a 300 s bucket (and a 600 s one): the hour is a multiple
// of both in Unix seconds.
var demandT0 = time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)

func demandPool(window time.Duration, prev *kobev1.DemandStatus) *kobev1.ClusterPool {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "ci", Namespace: "ns"},
		Spec:   kobev1.ClusterPoolSpec{Scaling: &kobev1.ScalingSpec{Mode: kobev1.ScalingPredictive}},
		Status: kobev1.ClusterPoolStatus{Demand: prev}}
	if window > 0 {
		p.Spec.Scaling.PredictiveWindow = &metav1.Duration{Duration: window}
	}
	return p
}

// leasesAt makes n leases of pool created at each offset from demandT0.
func leasesAt(pool string, n int, offsets ...time.Duration) []kobev1.ClusterLease {
	var ls []kobev1.ClusterLease
	for _, off := range offsets {
		for i := range n {
			ls = append(ls, kobev1.ClusterLease{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", pool, off, i), Namespace: "ns",
					CreationTimestamp: metav1.NewTime(demandT0.Add(off))},
				Spec: kobev1.ClusterLeaseSpec{Pool: pool}})
		}
	}
	return ls
}

// timedMember is a member created at demandT0+created that took ttr to be
// Ready.
func timedMember(name string, created, ttr time.Duration) kobev1.ClusterInstance {
	return kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(demandT0.Add(created))},
		Status: kobev1.ClusterInstanceStatus{TimeToReady: &metav1.Duration{Duration: ttr}}}
}

func buckets(bs ...any) []kobev1.ArrivalBucket {
	var out []kobev1.ArrivalBucket
	for i := 0; i < len(bs); i += 2 {
		out = append(out, kobev1.ArrivalBucket{Start: metav1.NewTime(demandT0.Add(bs[i].(time.Duration))), Count: int32(bs[i+1].(int))})
	}
	return out
}

func mustJSON(t *testing.T, d *kobev1.DemandStatus) string {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func roundTrip(t *testing.T, d *kobev1.DemandStatus) *kobev1.DemandStatus {
	t.Helper()
	out := &kobev1.DemandStatus{}
	if err := json.Unmarshal([]byte(mustJSON(t, d)), out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMeasureDemandWithoutScaling(t *testing.T) {
	p := demandPool(0, nil)
	p.Spec.Scaling = nil
	if d, rq := MeasureDemand(p, leasesAt("ci", 3, 0), nil, demandT0.Add(time.Minute)); d != nil || rq != 0 {
		t.Errorf("MeasureDemand = %+v, %s; want nil, 0 for a pool without scaling", d, rq)
	}
}

// TestMeasureDemandOverTime feeds each step's result back as the next
// step's history, as the controller does through the pool's status.
func TestMeasureDemandOverTime(t *testing.T) {
	minute := time.Minute
	sixty := []kobev1.ClusterInstance{timedMember("m0", 0, 60*time.Second)}
	// Three leases early in the first bucket, one still inside the cache
	// lag at the first look, leases of another pool, then a burst of 30 in
	// the fifth bucket.
	early := append(leasesAt("ci", 1, time.Second, 2*time.Second, 9*time.Second), leasesAt("other", 5, 3*time.Second)...)
	burst := append(append([]kobev1.ClusterLease{}, early...), leasesAt("ci", 30, 20*minute+10*time.Second)...)
	steps := []struct {
		name    string
		at      time.Duration
		leases  []kobev1.ClusterLease
		arr     []kobev1.ArrivalBucket
		through time.Duration
		peak    string
		target  int32
		requeue time.Duration
	}{
		{"a lease inside the cache lag waits", 10 * time.Second, early, buckets(time.Duration(0), 2), 2 * time.Second, "0.40", 1, time.Second},
		{"it is counted once the lag passed", 11 * time.Second, early, buckets(time.Duration(0), 3), 9 * time.Second, "0.60", 1, 65*minute - 11*time.Second},
		{"counted leases are not counted again", 5 * minute, early, buckets(time.Duration(0), 3), 9 * time.Second, "0.60", 1, 60 * minute},
		{"a burst raises the target", 21 * minute, burst, buckets(time.Duration(0), 3, 20*minute, 30), 20*minute + 10*time.Second, "6.00", 6, 44 * minute},
		{"the first bucket leaves the window", 65 * minute, burst, buckets(20*minute, 30), 20*minute + 10*time.Second, "6.00", 6, 20 * minute},
		{"the burst leaves the window and the target falls", 85 * minute, burst, nil, 20*minute + 10*time.Second, "0.00", 0, 0},
	}
	var prev *kobev1.DemandStatus
	for _, st := range steps {
		next, rq := MeasureDemand(demandPool(0, prev), st.leases, sixty, demandT0.Add(st.at))
		want := &kobev1.DemandStatus{Window: metav1.Duration{Duration: time.Hour}, BucketSeconds: 300, Arrivals: st.arr,
			CountedThrough: &metav1.Time{Time: demandT0.Add(st.through)}, PeakArrivalsPerMinute: st.peak, ProvisionSeconds: 60, WarmTarget: st.target}
		if !equality.Semantic.DeepEqual(next, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", st.name, next, want)
		}
		if rq != st.requeue {
			t.Errorf("%s: requeue %s, want %s", st.name, rq, st.requeue)
		}
		// At rest (same leases, same members, no bucket expiring) the
		// history does not change, so the status is not rewritten.
		// The history comes back from the API server as JSON.
		stored := roundTrip(t, next)
		again, _ := MeasureDemand(demandPool(0, stored), st.leases, sixty, demandT0.Add(st.at+500*time.Millisecond))
		if a, b := mustJSON(t, again), mustJSON(t, stored); a != b {
			t.Errorf("%s: measured again at rest:\n got %s\nwant %s", st.name, a, b)
		}
		prev = next
	}
}

// TestMeasureDemandFirstLook: with no history, every lease inside the
// window is counted, older ones are not, and countedThrough still moves
// past them all.
func TestMeasureDemandFirstLook(t *testing.T) {
	ls := leasesAt("ci", 2, -2*time.Hour, 10*time.Minute, 12*time.Minute)
	got, _ := MeasureDemand(demandPool(0, nil), ls, nil, demandT0.Add(30*time.Minute))
	want := buckets(10*time.Minute, 4)
	if !equality.Semantic.DeepEqual(got.Arrivals, want) || !got.CountedThrough.Equal(&metav1.Time{Time: demandT0.Add(12 * time.Minute)}) {
		t.Errorf("arrivals %+v through %v, want %+v through %s", got.Arrivals, got.CountedThrough, want, demandT0.Add(12*time.Minute))
	}
	// No member has a time to Ready and there is no history: nothing to
	// provision for, so no warm target.
	if got.ProvisionSeconds != 0 || got.WarmTarget != 0 || got.PeakArrivalsPerMinute != "0.80" {
		t.Errorf("provision %d target %d peak %s, want 0, 0, 0.80", got.ProvisionSeconds, got.WarmTarget, got.PeakArrivalsPerMinute)
	}
}

func TestMeasureDemandProvisionSeconds(t *testing.T) {
	s := time.Second
	var eleven []kobev1.ClusterInstance
	for i := range 11 {
		// The oldest member took an hour; the ten newest 10..100 s.
		ttr := time.Duration(10*i) * s
		if i == 0 {
			ttr = time.Hour
		}
		eleven = append(eleven, timedMember(fmt.Sprintf("m%02d", i), time.Duration(i)*time.Minute, ttr))
	}
	untimed := timedMember("untimed", 30*time.Minute, 0)
	untimed.Status.TimeToReady = nil
	cases := []struct {
		name    string
		members []kobev1.ClusterInstance
		prev    int32
		want    int32
	}{
		{"median of an odd count", []kobev1.ClusterInstance{timedMember("a", 0, 30*s), timedMember("b", 1, 90*s), timedMember("c", 2, 40*s)}, 0, 40},
		{"mean of the middle two, rounded up", []kobev1.ClusterInstance{timedMember("a", 0, 30*s), timedMember("b", 1, 41*s), timedMember("c", 2, 50*s), timedMember("d", 3, 99*s)}, 0, 46},
		{"only the ten newest count", eleven, 0, 55},
		{"members without a time to Ready are ignored", []kobev1.ClusterInstance{untimed, timedMember("a", 0, 20*s)}, 0, 20},
		{"a sub-second time rounds up", []kobev1.ClusterInstance{timedMember("a", 0, 300*time.Millisecond)}, 7, 1},
		{"no measurement keeps the previous value", []kobev1.ClusterInstance{untimed}, 94, 94},
		{"no measurement and no history", nil, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var prev *kobev1.DemandStatus
			if tc.prev > 0 {
				prev = &kobev1.DemandStatus{Window: metav1.Duration{Duration: time.Hour}, BucketSeconds: 300, ProvisionSeconds: tc.prev}
			}
			// 10 leases in one 300 s bucket: the target is ceil(10 x p / 300).
			got, _ := MeasureDemand(demandPool(0, prev), leasesAt("ci", 10, time.Minute), tc.members, demandT0.Add(2*time.Minute))
			if got.ProvisionSeconds != tc.want {
				t.Errorf("provisionSeconds %d, want %d", got.ProvisionSeconds, tc.want)
			}
			if want := int32(ceilDiv(10*int64(tc.want), 300)); got.WarmTarget != want {
				t.Errorf("warmTarget %d, want %d", got.WarmTarget, want)
			}
		})
	}
}

// TestMeasureDemandWindowChange: a window whose buckets nest the old ones
// keeps the history (summed); any other change restarts it from the leases
// that still exist.
func TestMeasureDemandWindowChange(t *testing.T) {
	m := time.Minute
	prev := &kobev1.DemandStatus{Window: metav1.Duration{Duration: time.Hour}, BucketSeconds: 300,
		Arrivals: buckets(time.Duration(0), 2, 5*m, 3, 10*m, 4), CountedThrough: &metav1.Time{Time: demandT0.Add(11 * m)},
		PeakArrivalsPerMinute: "0.80", ProvisionSeconds: 60, WarmTarget: 1}
	// Only some of the counted leases are still in the API, plus a new one.
	still := leasesAt("ci", 1, 6*m, 10*m, 11*m, 13*m)
	now := demandT0.Add(15 * m)

	wider, _ := MeasureDemand(demandPool(2*time.Hour, prev), still, nil, now)
	if wider.BucketSeconds != 600 || wider.Window.Duration != 2*time.Hour {
		t.Fatalf("window %s bucketSeconds %d, want 2h, 600", wider.Window.Duration, wider.BucketSeconds)
	}
	// 2+3 in [0,10m), 4 and the new lease at 13m in [10m,20m).
	if want := buckets(time.Duration(0), 5, 10*m, 5); !equality.Semantic.DeepEqual(wider.Arrivals, want) {
		t.Errorf("wider window: arrivals %+v, want %+v (summed, nothing counted twice)", wider.Arrivals, want)
	}
	if wider.WarmTarget != 1 || wider.PeakArrivalsPerMinute != "0.50" {
		t.Errorf("wider window: target %d peak %s, want 1, 0.50", wider.WarmTarget, wider.PeakArrivalsPerMinute)
	}

	narrower, _ := MeasureDemand(demandPool(30*m, prev), still, nil, now)
	if narrower.BucketSeconds != 150 {
		t.Fatalf("bucketSeconds %d, want 150", narrower.BucketSeconds)
	}
	want := buckets(5*m, 1, 10*m, 2, 12*m+30*time.Second, 1)
	if !equality.Semantic.DeepEqual(narrower.Arrivals, want) {
		t.Errorf("narrower window: arrivals %+v, want %+v (restarted from the leases that exist)", narrower.Arrivals, want)
	}
	if !narrower.CountedThrough.Equal(&metav1.Time{Time: demandT0.Add(13 * m)}) || narrower.ProvisionSeconds != 60 {
		t.Errorf("narrower window: through %v provision %d, want %s, 60", narrower.CountedThrough, narrower.ProvisionSeconds, demandT0.Add(13*m))
	}
}

func TestMeasureDemandBucketWidth(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		want   int32
	}{{0, 300}, {time.Minute, 5}, {90 * time.Second, 7}, {168 * time.Hour, 50400}} {
		got, _ := MeasureDemand(demandPool(tc.window, nil), nil, nil, demandT0)
		if got.BucketSeconds != tc.want {
			t.Errorf("window %s: bucketSeconds %d, want %d", tc.window, got.BucketSeconds, tc.want)
		}
	}
}
