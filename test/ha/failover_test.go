//go:build heavy

package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Load of TestFailoverUnderLoad.
const (
	loadRequests = 500
	loadClients  = 32
	// loadOwners token policies share the clients, so that no owner has
	// more leases waiting than --max-queued-per-owner allows by default.
	loadOwners = 4
	// loadKillAfter answered requests, the leader is SIGKILLed.
	loadKillAfter = 200
	loadPoolSize  = 48
)

// requestOutcome is how one of the load's requests ended.
type requestOutcome struct {
	kind string // "bound", "pending-then-bound", "refused", or "failed"
	// lease is the lease's id (bound kinds), member the member its
	// kubeconfig names.
	lease, member string
	// detail says why for "refused" (the answer's reason) and "failed".
	detail string
}

// liveReplicas tracks which replicas clients may call, as a Service's
// endpoints would.
type liveReplicas struct {
	mu   sync.Mutex
	live [2]bool
	// diedPOSTs and diedOther count calls that failed without an answer
	// (their replica died under them), POSTs and the rest.
	diedPOSTs, diedOther atomic.Int32
}

func (l *liveReplicas) set(i int, up bool) { l.mu.Lock(); l.live[i] = up; l.mu.Unlock() }

// pick returns replica n%2 if it is live, else the other.
func (l *liveReplicas) pick(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := n % 2; l.live[i] {
		return i
	}
	return 1 - n%2
}

// TestFailoverUnderLoad: 500 lease requests from 32 concurrent clients,
// spread over both replicas, against a sim pool that keeps 48 members warm
// (each client keeps what it gets, so the pool refills all along and many
// requests wait for a member); after 200 answers the leader
// is SIGKILLed (and started again once the other leads, as a Deployment
// would). Clients whose request dies with the leader retry on the other
// replica. Every request ends Bound, Pending then Bound, or refused with a
// reason; once the load is over no lease stays Pending; no member ever
// names two leases, no two leases name one member, and every kubeconfig
// handed out names the member its lease is bound to, which names the lease
// back.
func TestFailoverUnderLoad(t *testing.T) {
	var policies []policy
	for i := range loadOwners {
		policies = append(policies, policy{name: fmt.Sprintf("load-%d", i), identity: fmt.Sprintf("load-%d", i)})
	}
	c := startCluster(t, clusterOptions{policies: policies})
	lead, follow := c.leader(t)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	claims := watchMemberClaims(t, watchCtx, c.ns)
	c.createSimPool(t, "load", loadPoolSize, 0)
	c.waitPoolReady(t, "load", loadPoolSize)

	live := &liveReplicas{live: [2]bool{true, true}}
	outcomes := make([]requestOutcome, loadRequests)
	var next, answered atomic.Int32
	var failover struct {
		sync.Mutex
		killed, led, restarted time.Time
		err                    error
	}
	var failoverDone sync.WaitGroup
	var killOnce sync.Once
	kill := func() {
		failoverDone.Add(1)
		go func() {
			defer failoverDone.Done()
			live.set(lead, false)
			c.replica(lead).Kill()
			failover.Lock()
			failover.killed = time.Now()
			failover.Unlock()
			err := testenv.Poll(context.Background(), 3*c.timings.leaseDuration+30*time.Second, func() error {
				if err := c.replica(follow).Alive(); err != nil {
					return err
				}
				if !c.replica(follow).LogContains(acquiredMarker) {
					return fmt.Errorf("r%d does not lead yet", follow)
				}
				return nil
			})
			led := time.Now()
			if err == nil {
				// Restarted, the old leader's slot joins as a follower.
				c.start(t, lead)
				err = c.replica(lead).WaitReady(context.Background(), 90*time.Second)
				live.set(lead, err == nil)
			}
			failover.Lock()
			failover.led, failover.restarted, failover.err = led, time.Now(), err
			failover.Unlock()
		}()
	}

	start := time.Now()
	var clients sync.WaitGroup
	for ci := range loadClients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			token := c.tokens[fmt.Sprintf("load-%d", ci%loadOwners)]
			for {
				n := int(next.Add(1)) - 1
				if n >= loadRequests {
					return
				}
				out := c.loadRequest(live, n, token)
				outcomes[n] = out
				if answered.Add(1) == loadKillAfter {
					killOnce.Do(kill)
				}
			}
		}()
	}
	clients.Wait()
	loadTook := time.Since(start)
	failoverDone.Wait()
	if failover.err != nil {
		t.Fatalf("failover: %v", failover.err)
	}

	// Nothing stays Pending: leases created by requests that died with
	// the leader included.
	testenv.Eventually(t, 2*time.Minute, "every lease to leave Pending", func() error {
		var waiting []string
		for _, l := range c.leases(t) {
			if l.Status.Phase == "" || l.Status.Phase == kobev1.LeasePending {
				waiting = append(waiting, l.Name)
			}
		}
		if len(waiting) > 0 {
			return fmt.Errorf("%d leases waiting: %v", len(waiting), waiting)
		}
		return nil
	})
	stopWatch()
	<-claims.done

	counts := map[string]int{}
	for n, o := range outcomes {
		counts[o.kind]++
		switch o.kind {
		case "bound", "pending-then-bound":
		case "refused":
			if o.detail == "" {
				t.Errorf("request %d refused without a reason", n)
			}
		default:
			t.Errorf("request %d: %s %s", n, o.kind, o.detail)
		}
	}
	t.Logf("%d requests from %d clients in %s: %v; calls died with the leader and were retried on the other replica: %d POSTs, %d GETs and DELETEs",
		loadRequests, loadClients, loadTook.Round(100*time.Millisecond), counts, live.diedPOSTs.Load(), live.diedOther.Load())
	t.Logf("failover under load: the survivor r%d led %s after the kill; r%d served again %s after it",
		follow, failover.led.Sub(failover.killed).Round(100*time.Millisecond), lead, failover.restarted.Sub(failover.killed).Round(100*time.Millisecond))

	c.checkNoMemberBoundTwice(t, claims, outcomes)
}

// loadRequest POSTs request n and follows it to its end: Bound at once,
// Pending then Bound (GET until Bound), or refused.
func (c *cluster) loadRequest(live *liveReplicas, n int, token string) requestOutcome {
	ctx := context.Background()
	for attempt := n; ; attempt++ {
		if attempt > n+20 {
			return requestOutcome{kind: "failed", detail: "no replica answered 20 tries"}
		}
		r := live.pick(attempt)
		code, b, err := c.do(ctx, r, http.MethodPost, "/v1/leases", token, wire.CreateLeaseRequest{Pool: "load", TTL: "30m"})
		if err != nil {
			// The replica died under the request (the leader's kill).
			live.diedPOSTs.Add(1)
			time.Sleep(200 * time.Millisecond) // a client's back-off
			continue
		}
		switch code {
		case http.StatusCreated, http.StatusAccepted:
			var l wire.Lease
			if err := json.Unmarshal(b, &l); err != nil {
				return requestOutcome{kind: "failed", detail: fmt.Sprintf("%d %s", code, b)}
			}
			if code == http.StatusCreated {
				return boundOutcome("bound", l)
			}
			return c.waitBound(live, n, token, l.ID)
		default:
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(b, &e) != nil || e.Error == "" {
				return requestOutcome{kind: "failed", detail: fmt.Sprintf("answered %d without a reason: %s", code, b)}
			}
			return requestOutcome{kind: "refused", detail: e.Error}
		}
	}
}

// boundOutcome checks that a Bound answer carries a kubeconfig for the
// member it names.
func boundOutcome(kind string, l wire.Lease) requestOutcome {
	if l.Phase != wire.PhaseBound || l.Kubeconfig == "" || l.ClusterName == "" {
		return requestOutcome{kind: "failed", lease: l.ID, detail: fmt.Sprintf("answer phase %s, member %q, kubeconfig %t", l.Phase, l.ClusterName, l.Kubeconfig != "")}
	}
	cfg, err := clientcmd.Load([]byte(l.Kubeconfig))
	if err != nil {
		return requestOutcome{kind: "failed", lease: l.ID, detail: "kubeconfig: " + err.Error()}
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || ctx.Cluster != l.ClusterName {
		return requestOutcome{kind: "failed", lease: l.ID, detail: fmt.Sprintf("kubeconfig context %+v does not name member %s", ctx, l.ClusterName)}
	}
	return requestOutcome{kind: kind, lease: l.ID, member: l.ClusterName}
}

// waitBound GETs a Pending lease until it is Bound, for at most 3 minutes.
func (c *cluster) waitBound(live *liveReplicas, n int, token, id string) requestOutcome {
	deadline := time.Now().Add(3 * time.Minute)
	last := "no answer"
	for attempt := n; time.Now().Before(deadline); attempt++ {
		code, b, err := c.do(context.Background(), live.pick(attempt), http.MethodGet, "/v1/leases/"+id, token, nil)
		switch {
		case err != nil:
			live.diedOther.Add(1)
			last = err.Error()
		case code != http.StatusOK:
			last = fmt.Sprintf("GET answered %d: %s", code, b)
		default:
			var l wire.Lease
			if err := json.Unmarshal(b, &l); err != nil {
				return requestOutcome{kind: "failed", lease: id, detail: fmt.Sprintf("GET answered %s", b)}
			}
			switch l.Phase {
			case wire.PhaseBound:
				return boundOutcome("pending-then-bound", l)
			case wire.PhasePending:
				last = fmt.Sprintf("Pending at %d", l.QueuePosition)
			default:
				return requestOutcome{kind: "failed", lease: id, detail: fmt.Sprintf("ended %s (%s) while waiting", l.Phase, l.Reason)}
			}
		}
		time.Sleep(250 * time.Millisecond) // a client's poll interval
	}
	return requestOutcome{kind: "failed", lease: id, detail: "still waiting after 3m: " + last}
}

// checkNoMemberBoundTwice compares every lease's status with what every
// member ever named (claims): no two leases name one member, no member
// ever named two leases, a bound lease's member named it, and each
// kubeconfig named a member that named its lease.
func (c *cluster) checkNoMemberBoundTwice(t *testing.T, claims *memberClaims, outcomes []requestOutcome) {
	t.Helper()
	named, names, err := claims.result()
	if err != nil {
		t.Fatal(err)
	}
	leases := c.leases(t)
	byID := map[string]kobev1.ClusterLease{}
	owner := map[types.UID]string{}
	for _, l := range leases {
		byID[l.Name] = l
		ref := l.Status.InstanceRef
		if ref == nil {
			continue
		}
		if other, ok := owner[ref.UID]; ok {
			t.Errorf("member %s (%s) is the member of leases %s and %s", ref.Name, ref.UID, other, l.Name)
		}
		owner[ref.UID] = l.Name
		if !slices.Contains(named[ref.UID], l.UID) {
			t.Errorf("lease %s is bound to member %s, which never named it (it named %v)", l.Name, ref.Name, named[ref.UID])
		}
	}
	for m, ls := range named {
		if len(ls) > 1 {
			t.Errorf("member %s (%s) named %d leases over time: %v", names[m], m, len(ls), ls)
		}
	}
	claimedBy := map[types.UID][]types.UID{} // lease -> members that named it
	for m, ls := range named {
		for _, l := range ls {
			claimedBy[l] = append(claimedBy[l], m)
		}
	}
	bound := 0
	for n, o := range outcomes {
		if o.lease == "" || !strings.Contains(o.kind, "bound") {
			continue
		}
		bound++
		l, ok := byID[o.lease]
		if !ok {
			t.Errorf("request %d: lease %s is gone", n, o.lease)
			continue
		}
		// The member is the fence: the one the kubeconfig names must be
		// a member that named this lease (and, checked above, no other).
		fenced := false
		for _, m := range claimedBy[l.UID] {
			fenced = fenced || names[m] == o.member
		}
		if !fenced {
			t.Errorf("request %d: the kubeconfig of lease %s names member %s, which never named the lease (members naming it: %v)", n, o.lease, o.member, claimedBy[l.UID])
		}
		switch ref := l.Status.InstanceRef; {
		case ref == nil:
			t.Errorf("request %d: lease %s was handed out with member %s, its status records none (phase %s)", n, o.lease, o.member, l.Status.Phase)
		case ref.Name != o.member:
			t.Errorf("request %d: the kubeconfig of lease %s names member %s, the lease records %s", n, o.lease, o.member, ref.Name)
		}
	}
	answeredIDs := map[string]bool{}
	for _, o := range outcomes {
		answeredIDs[o.lease] = true
	}
	orphans := 0
	for _, l := range leases {
		if !answeredIDs[l.Name] {
			orphans++
		}
	}
	t.Logf("%d leases in all, %d kubeconfigs handed out, %d members ever claimed, %d leases created by requests that died with a replica",
		len(leases), bound, len(named), orphans)
	if len(named) < bound {
		t.Errorf("%d kubeconfigs but only %d members ever claimed", bound, len(named))
	}
}
