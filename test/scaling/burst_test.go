//go:build heavy

package scaling

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestBurstGrowsToMaxClustersAndShrinksAfterQuiet: a burst of leases through
// the API grows a Reactive pool up to maxClusters and never past it (a
// watch sees every member); the callers give up while the new members
// build, so they turn Ready as surplus, and the pool keeps that surplus
// until scaleDownAfter has passed since status.lastPressure, then shrinks
// back to minReady, removing only idle Ready members.
func TestBurstGrowsToMaxClustersAndShrinksAfterQuiet(t *testing.T) {
	t.Parallel()
	const (
		name           = "burst"
		maxClusters    = 6
		burst          = 7
		scaleDownAfter = 20 * time.Second
		// readyAfter leaves time to release the queued leases while the
		// members built for them are still Creating.
		readyAfter = 10 * time.Second
	)
	start := time.Now()
	members := watchMembers(t, namespace, name)
	pools := watchPool(t, namespace, name)
	p := simPool(namespace, name, kobev1.SimBackendSpec{ReadyAfter: dur(readyAfter)})
	p.Spec.Scaling = &kobev1.ScalingSpec{
		MinReady:       ptr.To[int32](1),
		MaxClusters:    ptr.To[int32](maxClusters),
		ScaleDownAfter: dur(scaleDownAfter),
	}
	createPool(t, p)
	waitPool(t, namespace, name, time.Minute, "1 Ready member at rest", func(p *kobev1.ClusterPool) error {
		if p.Status.Ready != 1 || p.Status.Creating != 0 {
			return fmt.Errorf("not at rest")
		}
		return nil
	})
	t.Logf("%s: 1 Ready", since(start))

	// The burst: more leases than maxClusters, through the real API.
	a := suiteAPI()
	burstAt := time.Now()
	var leases []wire.Lease
	for range burst {
		leases = append(leases, a.lease(t, name))
	}
	queued := 0
	for _, l := range leases {
		if l.Phase == wire.PhasePending {
			queued++
		}
	}
	if queued < burst-maxClusters {
		t.Fatalf("%d of %d leases queued; the pool had 1 Ready member", queued, burst)
	}
	grown := waitPool(t, namespace, name, 30*time.Second, "grown to maxClusters, refusing more", func(p *kobev1.ClusterPool) error {
		if n := p.Status.Ready + p.Status.Leased + p.Status.Creating; n != maxClusters {
			return fmt.Errorf("%d members, want %d", n, maxClusters)
		}
		if p.Status.LastPressure == nil {
			return fmt.Errorf("no lastPressure under a queue of %d", p.Status.QueueDepth)
		}
		return hasCondition(p, kobev1.ConditionCapacity, metav1.ConditionFalse, kobev1.ReasonMaxClustersReached)
	})
	t.Logf("%s: grown to %d members (%d creating, %d leased), lastPressure %s", since(start), maxClusters, grown.Status.Creating, grown.Status.Leased, grown.Status.LastPressure)

	// The callers give up before the new members are Ready.
	for _, l := range leases {
		a.release(t, l.ID)
	}
	released := time.Now()
	t.Logf("%s: released %d leases %s after the burst", since(start), burst, released.Sub(burstAt).Round(time.Millisecond))

	// Shortly after the release the surplus is still there: scale-down may
	// start only scaleDownAfter after lastPressure, and lastPressure is at
	// least the burst (the queue stood from the burst to the release).
	check := released.Add(5 * time.Second)
	testenv.Consistently(t, max(time.Until(check), 0), "the surplus to stay until scale-down is allowed", func() error {
		cur, err := getPool(t.Context(), namespace, name)
		if err != nil {
			return err
		}
		if lp := cur.Status.LastPressure; lp == nil || !time.Now().Before(lp.Add(scaleDownAfter)) {
			return nil // judged below
		}
		if got := cur.Status.Ready + cur.Status.Creating; got <= 1 {
			return fmt.Errorf("%s after the release (scale-down allowed only at lastPressure %s + %s), the pool has %d Ready or Creating: the surplus went early; %s",
				time.Since(released).Round(time.Millisecond), cur.Status.LastPressure.UTC(), scaleDownAfter, got, brief(cur))
		}
		return nil
	})
	p = mustPool(t, namespace, name)
	if p.Status.LastPressure == nil || p.Status.LastPressure.Time.Before(burstAt.Add(-time.Second)) {
		t.Fatalf("lastPressure %v is before the burst (%s)", p.Status.LastPressure, burstAt.UTC())
	}
	if allowed := p.Status.LastPressure.Add(scaleDownAfter); !time.Now().Before(allowed) {
		t.Errorf("the check %s after the release came after scale-down was allowed (%s): the machine is too slow for the check to mean anything", check.Sub(released), allowed.UTC())
	}

	final := waitPool(t, namespace, name, 2*time.Minute, "shrunk back to minReady", func(p *kobev1.ClusterPool) error {
		if p.Status.Ready != 1 || p.Status.Creating != 0 || p.Status.Leased != 0 || p.Status.Recycling != 0 {
			return fmt.Errorf("not back to 1 Ready")
		}
		return nil
	})
	t.Logf("%s: back to 1 Ready (%s after the release); lastPressure %s", since(start), time.Since(released).Round(time.Second), final.Status.LastPressure.UTC())

	events := members.snapshot(t)
	if most := maxAlive(events); most > maxClusters {
		t.Errorf("%d members existed at once, maxClusters is %d", most, maxClusters)
	} else if most < maxClusters {
		t.Errorf("at most %d members at once: the burst did not grow the pool to maxClusters %d", most, maxClusters)
	}
	// Every member deleted without ever holding a lease was scaled down:
	// it must have been Ready, and deleted no earlier than scaleDownAfter
	// after the final lastPressure (seconds, truncated: never later than
	// the pressure it records).
	last := map[string]*kobev1.ClusterInstance{}
	scaledDown := 0
	for _, e := range events {
		m := e.obj
		if m.DeletionTimestamp == nil {
			last[m.Name] = m
			continue
		}
		if e.typ == watch.Deleted || last[m.Name] == nil {
			continue
		}
		before := last[m.Name]
		delete(last, m.Name)
		if before.Spec.LeaseRef != nil || m.Spec.LeaseRef != nil {
			continue
		}
		scaledDown++
		if before.Status.Phase != kobev1.InstanceReady {
			t.Errorf("member %s was scaled down in phase %s; only idle Ready members may be", m.Name, before.Status.Phase)
		}
		if e.at.Before(final.Status.LastPressure.Add(scaleDownAfter)) {
			t.Errorf("member %s was deleted at %s, before lastPressure %s + scaleDownAfter %s", m.Name, e.at.UTC(), final.Status.LastPressure.UTC(), scaleDownAfter)
		}
	}
	if t.Failed() {
		for _, e := range pools.snapshot(t) {
			t.Logf("pool at %s: %s", e.at.UTC().Format(time.StampMilli), brief(e.obj))
		}
	}
	if scaledDown == 0 {
		t.Error("no member was scaled down: the burst left no surplus, so the check above has no teeth")
	}
	t.Logf("%d members scaled down after the quiet period", scaledDown)
}
