//go:build heavy

package ha

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// controllerStartMarker is what controller-runtime logs when a controller
// starts, which a manager does only once it leads.
const controllerStartMarker = "Starting Controller"

// TestOnlyTheLeaderReconciles: of two replicas with --leader-elect, one
// leads and starts the controllers; the other starts none, and the API
// server's managedFields show that it never created, changed or removed a
// member or a pool. Both serve leases: each hands out a member with a
// kubeconfig. The follower's work after an answer (the lease's status copy,
// its Event) is done by the follower itself: with the leader frozen
// (SIGSTOP), a lease handed out by the follower is recorded Bound, written
// by the follower, and its Bound Event is emitted.
func TestOnlyTheLeaderReconciles(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	lead, follow := c.leader(t)
	c.createSimPool(t, "sim", 6, 0)
	c.waitPoolReady(t, "sim", 6)

	// Both replicas serve leases.
	var handedOut []wire.Lease
	for _, i := range []int{lead, follow} {
		code, b := c.call(t, i, http.MethodPost, "/v1/leases", c.token, wire.CreateLeaseRequest{Pool: "sim", TTL: "10m"})
		if code != http.StatusCreated {
			t.Fatalf("POST /v1/leases on r%d answered %d: %s", i, code, b)
		}
		var l wire.Lease
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		if l.Phase != wire.PhaseBound || l.Kubeconfig == "" {
			t.Fatalf("r%d answered phase %s with kubeconfig %t", i, l.Phase, l.Kubeconfig != "")
		}
		handedOut = append(handedOut, l)
	}

	// The follower's after-answer work, with the leader unable to do any.
	if err := c.replica(lead).Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	code, b := c.call(t, follow, http.MethodPost, "/v1/leases", c.token, wire.CreateLeaseRequest{Pool: "sim", TTL: "10m"})
	var byFollower wire.Lease
	if err := json.Unmarshal(b, &byFollower); err != nil || code != http.StatusCreated || byFollower.Phase != wire.PhaseBound {
		_ = c.replica(lead).Thaw()
		t.Fatalf("POST /v1/leases on the follower with the leader frozen answered %d: %s", code, b)
	}
	// Well within the leader-election lease duration, so that the
	// follower cannot have taken over meanwhile.
	recordWithin := c.timings.leaseDuration / 2
	err := testenv.Poll(t.Context(), recordWithin, func() error {
		l := &kobev1.ClusterLease{}
		if err := suite.env.Client.Get(t.Context(), types.NamespacedName{Namespace: c.ns, Name: byFollower.ID}, l); err != nil {
			return err
		}
		if l.Status.Phase != kobev1.LeaseBound || l.Status.InstanceRef == nil || l.Status.InstanceRef.Name != byFollower.ClusterName {
			return fmt.Errorf("lease status %+v", l.Status)
		}
		written := false
		for _, w := range replicaWrites(l, follow) {
			written = written || strings.HasPrefix(w, "Update status")
		}
		if !written {
			return fmt.Errorf("status Bound, but not written by r%d: managedFields %v", follow, l.GetManagedFields())
		}
		return nil
	})
	heldFor := time.Since(frozen)
	if terr := c.replica(lead).Thaw(); terr != nil {
		t.Fatal(terr)
	}
	if err != nil {
		t.Fatalf("the follower did not record its hand-out on the lease within %s with the leader frozen: %v", recordWithin, err)
	}
	t.Logf("with the leader frozen for %s, the follower recorded its hand-out %s", heldFor.Round(time.Millisecond), byFollower.ID)
	handedOut = append(handedOut, byFollower)

	// The pool refills the three members handed out; the leader, thawed,
	// is still the leader and the follower still follows.
	c.waitPoolReady(t, "sim", 6)
	if l2, _ := c.leader(t); l2 != lead {
		t.Fatalf("leadership moved from r%d to r%d", lead, l2)
	}
	if !c.replica(lead).LogContains(controllerStartMarker) {
		t.Errorf("the leader r%d never logged %q", lead, controllerStartMarker)
	}
	if c.replica(follow).LogContains(controllerStartMarker) {
		t.Errorf("the follower r%d started controllers:\n%s", follow, c.replica(follow).Tail(4000))
	}

	// Nothing of the pool's is the follower's doing, beyond the claims of
	// the members it handed out (a bind's claim).
	claimedBy := map[string]bool{}
	for _, l := range handedOut {
		claimedBy[l.ClusterName] = true
	}
	members := c.members(t)
	if len(members) < 9 {
		t.Fatalf("%d members, want 6 Ready and 3 handed out", len(members))
	}
	leaderMadeAll := true
	for _, m := range members {
		writes := replicaWrites(&m, follow)
		switch {
		case len(writes) == 0:
		case claimedBy[m.Name] && onlyClaim(writes):
		default:
			t.Errorf("the follower r%d wrote member %s: %v", follow, m.Name, writes)
		}
		if len(replicaWrites(&m, lead)) == 0 {
			leaderMadeAll = false
		}
	}
	if !leaderMadeAll {
		t.Errorf("some member has no write of the leader r%d: the check above would see nothing", lead)
	}
	p := &kobev1.ClusterPool{}
	if err := suite.env.Client.Get(t.Context(), types.NamespacedName{Namespace: c.ns, Name: "sim"}, p); err != nil {
		t.Fatal(err)
	}
	if w := replicaWrites(p, follow); len(w) > 0 {
		t.Errorf("the follower r%d wrote the pool: %v", follow, w)
	}
	if len(replicaWrites(p, lead)) == 0 {
		t.Errorf("the leader r%d never wrote the pool's status", lead)
	}
}

// onlyClaim reports whether writes (replicaWrites) own nothing but what a
// bind's claim writes on a member (binding.SetMemberBinding): its
// spec.leaseRef, its lease label and its owner references.
func onlyClaim(writes []string) bool {
	allowed := map[string]map[string]bool{
		"f:spec":     {"f:leaseRef": true},
		"f:metadata": {"f:labels": true, "f:ownerReferences": true},
	}
	for _, w := range writes {
		i := strings.Index(w, "{")
		if i < 0 {
			return false
		}
		var owned map[string]map[string]any
		if err := json.Unmarshal([]byte(w[i:]), &owned); err != nil {
			return false
		}
		for top, sub := range owned {
			for k := range sub {
				if !allowed[top][k] {
					return false
				}
			}
		}
		if labels, ok := owned["f:metadata"]["f:labels"].(map[string]any); ok {
			for k := range labels {
				if k != "." && k != "f:"+kobev1.LabelLease {
					return false
				}
			}
		}
	}
	return true
}

// TestGracefulHandover: a leader stopped with SIGTERM (a rolling update)
// releases its leader-election lease, so the other replica leads within a
// few retry periods instead of waiting out the lease duration; the new
// leader's controllers then work (a new pool fills).
func TestGracefulHandover(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	lead, follow := c.leader(t)
	stopped := time.Now()
	if err := c.replica(lead).Stop(); err != nil {
		t.Fatal(err)
	}
	stopTook := time.Since(stopped)
	if l2, _ := c.leader(t); l2 != follow {
		t.Fatalf("r%d leads, want r%d", l2, follow)
	}
	took := time.Since(stopped)
	t.Logf("SIGTERM on the leader r%d: it exited in %s, r%d led %s after the signal (lease duration %s, retry period %s)",
		lead, stopTook.Round(100*time.Millisecond), follow, took.Round(100*time.Millisecond), c.timings.leaseDuration, c.timings.retryPeriod)
	// Without the release the follower waits out the lease duration from
	// the last renewal, at least leaseDuration - retryPeriod after it.
	if limit := c.timings.leaseDuration - c.timings.retryPeriod; took >= limit {
		t.Errorf("the follower led %s after SIGTERM on the leader, not sooner than waiting out the lease (%s)", took, limit)
	}
	c.createSimPool(t, "after", 2, 0)
	c.waitPoolReady(t, "after", 2)
}
