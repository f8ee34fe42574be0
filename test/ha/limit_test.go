//go:build heavy

package ha

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// outcome is what a burst of POST /v1/leases got back.
type outcome struct {
	// admitted are the leases answered 201 or 202, by id.
	admitted []string
	// refused counts the refusals by status and reason, e.g. "429 ConcurrentLeaseLimit".
	refused map[string]int
}

// burst sends n POST /v1/leases with token at once, alternating between
// the two replicas.
func (c *cluster) burst(t *testing.T, token string, req wire.CreateLeaseRequest, n int) outcome {
	t.Helper()
	out := outcome{refused: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			code, b, err := c.do(t.Context(), i%2, http.MethodPost, "/v1/leases", token, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("POST /v1/leases on r%d: %v", i%2, err)
			case code == http.StatusCreated || code == http.StatusAccepted:
				var l wire.Lease
				if err := json.Unmarshal(b, &l); err != nil {
					t.Errorf("answer %d %s: %v", code, b, err)
					return
				}
				out.admitted = append(out.admitted, l.ID)
			default:
				var e wire.ErrorBody
				_ = json.Unmarshal(b, &e)
				out.refused[fmt.Sprintf("%d %s", code, e.Reason)]++
			}
		})
	}
	close(start)
	wg.Wait()
	slices.Sort(out.admitted)
	return out
}

// activeOf lists the active leases of policy's caller, by name, from the
// API server.
func (c *cluster) activeOf(t *testing.T, policy string) []string {
	t.Helper()
	var out []string
	for _, l := range c.leases(t) {
		if l.Spec.Requester.Policy == policy && lease.IsActive(&l) {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

// release releases each lease through the replicas in turn.
func (c *cluster) release(t *testing.T, token string, ids []string) {
	t.Helper()
	for i, id := range ids {
		if code, b := c.call(t, i%2, http.MethodDelete, "/v1/leases/"+id, token, nil); code != http.StatusOK && code != http.StatusNoContent {
			t.Fatalf("DELETE /v1/leases/%s answered %d: %s", id, code, b)
		}
	}
}

// TestLimitsExactOnTwoProcesses: with two real kobe-operator
// processes serving the API, 20 concurrent requests of a caller with
// maxConcurrentLeases 3, spread over both, admit exactly 3 leases and
// refuse 17 with 429 ConcurrentLeaseLimit, round after round; with one
// slot left, one request on each replica at once get one lease; 20 requests
// for one alias admit exactly one; and a caller without a limit has at most
// --max-queued-per-owner leases waiting (429 QueuedLeaseLimit beyond).
func TestLimitsExactOnTwoProcesses(t *testing.T) {
	const maxQueued = 4
	c := startCluster(t, clusterOptions{
		policies: []policy{
			{name: "limited", identity: "ci", rules: []kobev1.AccessRule{{Pools: []string{"*"}, MaxConcurrentLeases: ptr.To[int32](3)}}},
			{name: "open", identity: "ci"}, // the same identity under another policy: another owner
		},
		args: []string{"--max-queued-per-owner", fmt.Sprint(maxQueued)},
	})
	c.createSimPool(t, "sim", 2, 0) // two leases bind at once, the third waits
	c.createSimPool(t, "empty", 0, 0)
	c.waitPoolReady(t, "sim", 2)
	limited, open := c.tokens["limited"], c.tokens["open"]

	for round := range 3 {
		got := c.burst(t, limited, wire.CreateLeaseRequest{Pool: "sim", TTL: "10m"}, 20)
		held := c.activeOf(t, "limited")
		if len(got.admitted) != 3 || got.refused["429 "+wire.ReasonConcurrentLeaseLimit] != 17 || !slices.Equal(got.admitted, held) {
			t.Fatalf("round %d: admitted %v, refused %v, held %v; want exactly 3 admitted and held, 17 refused with %s",
				round, got.admitted, got.refused, held, wire.ReasonConcurrentLeaseLimit)
		}
		t.Logf("round %d: admitted %v, refused %v", round, got.admitted, got.refused)
		c.release(t, limited, held)
	}

	// The last slot, asked for on both replicas at once: exactly one gets it.
	two := c.burst(t, limited, wire.CreateLeaseRequest{Pool: "empty", TTL: "10m"}, 2)
	if len(two.admitted) != 2 {
		t.Fatalf("two leases under a limit of 3: admitted %v, refused %v", two.admitted, two.refused)
	}
	for trial := range 6 {
		got := c.burst(t, limited, wire.CreateLeaseRequest{Pool: "empty", TTL: "10m"}, 2)
		if len(got.admitted) != 1 || got.refused["429 "+wire.ReasonConcurrentLeaseLimit] != 1 {
			t.Fatalf("last slot, trial %d: admitted %v, refused %v; want exactly one each", trial, got.admitted, got.refused)
		}
		c.release(t, limited, got.admitted)
	}
	c.release(t, limited, two.admitted)

	got := c.burst(t, open, wire.CreateLeaseRequest{Pool: "empty", TTL: "10m", Alias: "the-one"}, 20)
	if len(got.admitted) != 1 || got.refused["409 "+wire.ReasonAliasInUse] != 19 {
		t.Fatalf("one alias: admitted %v, refused %v; want exactly one, 19 refused with %s", got.admitted, got.refused, wire.ReasonAliasInUse)
	}
	c.release(t, open, got.admitted)

	got = c.burst(t, open, wire.CreateLeaseRequest{Pool: "empty", TTL: "10m"}, 12)
	waiting := c.activeOf(t, "open")
	if len(got.admitted) != maxQueued || got.refused["429 "+wire.ReasonQueuedLeaseLimit] != 12-maxQueued || !slices.Equal(got.admitted, waiting) {
		t.Fatalf("waiting cap %d: admitted %v, refused %v, active %v; want exactly %d waiting", maxQueued, got.admitted, got.refused, waiting, maxQueued)
	}
	t.Logf("waiting cap: admitted %v, refused %v", got.admitted, got.refused)
}
