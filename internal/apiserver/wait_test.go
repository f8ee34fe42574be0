//go:build integration

package apiserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// answered is a request's answer and when it came.
type answered struct {
	r   response
	err error
	at  time.Time
}

// sendAsync sends req on its own goroutine.
func sendAsync(req *http.Request) <-chan answered {
	out := make(chan answered, 1)
	go func() {
		r, err := roundTrip(req)
		out <- answered{r: r, err: err, at: time.Now()}
	}()
	return out
}

// waitPool creates a pool without members that nothing reconciles: its
// leases stay Pending until a test binds them.
func waitPool(t *testing.T, name string) {
	t.Helper()
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](0), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if err := fx.env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	// Leases are refused until the server's cache holds the pool.
	eventually(t, "pool "+name+" in the cache", func(context.Context) bool {
		return call(t, tokenOf("everything"), http.MethodGet, "/v1/pools/"+name, nil).code == http.StatusOK
	})
}

// TestGetWaitsWhilePending: GET /v1/leases/{id}?wait= holds its answer while
// the lease is Pending and answers Bound, with a kubeconfig, as soon as a
// member is bound to it; it answers at once for a lease that is not Pending
// and for another caller's lease (404, as without wait), and a wait it
// cannot honour is a 400.
func TestGetWaitsWhilePending(t *testing.T) {
	const pool = "ci-wait"
	waitPool(t, pool)
	creds := tokenOf("ci-only")
	l := decode[wire.Lease](t, call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool, TTL: "10m"}), http.StatusAccepted)

	asked := time.Now()
	held := sendAsync(prepare(t, creds, http.MethodGet, "/v1/leases/"+l.ID+"?wait=20s", nil))
	select {
	case a := <-held:
		t.Fatalf("a Pending lease's GET ?wait=20s answered after %s: %s (%v)", a.at.Sub(asked), a.r, a.err)
	case <-time.After(time.Second):
	}

	// Bind it as the lease controller does when a member turns Ready.
	if _, err := fx.readyMember(t.Context(), pool, pool+"-00"); err != nil {
		t.Fatal(err)
	}
	obj := &kobev1.ClusterLease{}
	if err := fx.env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: l.ID}, obj); err != nil {
		t.Fatal(err)
	}
	binder := &binding.Binder{Client: fx.mgr.GetClient(), Reader: fx.mgr.GetClient(), Clock: clock.RealClock{}}
	testenv.Eventually(t, 10*time.Second, "the lease bound", func() error {
		_, err := binder.Bind(t.Context(), obj) // no member until the cache shows it
		return err
	})
	bound := time.Now()
	select {
	case a := <-held:
		if a.err != nil {
			t.Fatal(a.err)
		}
		got := decode[wire.Lease](t, a.r, http.StatusOK)
		if got.Phase != wire.PhaseBound || got.Kubeconfig == "" {
			t.Fatalf("answer after the bind: %s with kubeconfig %t, want Bound with one", got.Phase, got.Kubeconfig != "")
		}
		t.Logf("answered %s after the bind (asked %s before it)", a.at.Sub(bound), bound.Sub(asked))
	case <-time.After(10 * time.Second):
		t.Fatal("the held GET did not answer within 10s of the bind")
	}

	// Not Pending: at once.
	start := time.Now()
	if got := decode[wire.Lease](t, call(t, creds, http.MethodGet, "/v1/leases/"+l.ID+"?wait=20s", nil), http.StatusOK); got.Phase != wire.PhaseBound {
		t.Fatalf("GET of the Bound lease: %s", got.Phase)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("GET ?wait=20s of a Bound lease took %s, want an answer at once", d)
	}

	// Another caller's Pending lease: 404 at once, nothing learnt by waiting.
	other := decode[wire.Lease](t, call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool, TTL: "10m"}), http.StatusAccepted)
	start = time.Now()
	if r := call(t, tokenOf("owner-b"), http.MethodGet, "/v1/leases/"+other.ID+"?wait=20s", nil); r.code != http.StatusNotFound {
		t.Errorf("another caller's GET ?wait=20s: %s, want 404", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("another caller's GET ?wait=20s took %s, want the 404 at once", d)
	}

	for _, bad := range []string{"1h", "0s", "soon", "-5s"} {
		r := call(t, creds, http.MethodGet, "/v1/leases/"+other.ID+"?wait="+bad, nil)
		if r.code != http.StatusBadRequest || !strings.Contains(string(r.body), "want a duration from 1ms to 30s") {
			t.Errorf("?wait=%s: %s, want 400 saying what a wait may be", bad, r)
		}
	}
	if r := call(t, creds, http.MethodDelete, "/v1/leases/"+other.ID, nil); r.code != http.StatusNoContent {
		t.Fatalf("releasing %s: %s", other.ID, r)
	}
}

// TestWaitingHoldsNoInFlightSlot: on a server that serves one request at a
// time, a GET waiting while its lease is Pending leaves that one slot to
// the next request, and still answers when its wait ends.
func TestWaitingHoldsNoInFlightSlot(t *testing.T) {
	const pool = "ci-wait-slot"
	waitPool(t, pool)
	base := startServer(t, auth.Options{}, func(o *apiserver.Options) { o.MaxInFlight = 1 })
	host := strings.TrimPrefix(base, "http://")
	creds := tokenOf("ci-only")
	l := decode[wire.Lease](t, callAt(t, base, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool, TTL: "10m"}), http.StatusAccepted)

	req := prepare(t, creds, http.MethodGet, "/v1/leases/"+l.ID+"?wait=3s", nil)
	req.URL.Host = host
	asked := time.Now()
	held := sendAsync(req)
	time.Sleep(500 * time.Millisecond)
	for range 3 {
		if r := callAt(t, base, creds, http.MethodGet, "/v1/pools", nil); r.code != http.StatusOK {
			t.Fatalf("GET /v1/pools while a GET waits on a one-request server: %s, want 200", r)
		}
	}
	select {
	case a := <-held:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if got := decode[wire.Lease](t, a.r, http.StatusOK); got.Phase != wire.PhasePending || got.QueuePosition != 1 {
			t.Fatalf("after its wait: %s at %d, want Pending at 1", got.Phase, got.QueuePosition)
		}
		if d := a.at.Sub(asked); d < 2*time.Second {
			t.Errorf("the waiting GET answered after %s, want its 3s wait", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting GET did not answer")
	}
	if r := callAt(t, base, creds, http.MethodDelete, "/v1/leases/"+l.ID, nil); r.code != http.StatusNoContent {
		t.Fatalf("releasing %s: %s", l.ID, r)
	}
}
