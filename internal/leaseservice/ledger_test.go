//go:build integration

package leaseservice_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Limits exact on every replica. Each test runs two replicas: two
// services, each with its own manager, cache and in-process locks, against
// the one API server, as two operator processes serving the API at once.

// replica is one more operator replica's lease service, with a manager of
// its own.
func replica(t *testing.T, mut ...func(*leaseservice.Options)) *leaseservice.Service {
	t.Helper()
	mgr := fx.env.NewManager(t, ns)
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	clk := clock.RealClock{}
	opts := leaseservice.Options{
		Namespace: ns,
		Client:    mgr.GetClient(),
		Reader:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Binder:    &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk},
		Clock:     clk,
		Log:       logr.Discard(),
		Access:    accesstest.Sealer(),
	}
	for _, f := range mut {
		f(&opts)
	}
	return leaseservice.New(opts)
}

// burst sends n requests of p at once, spread evenly over replicas, and
// returns the leases created and the refusals.
func burst(t *testing.T, replicas []*leaseservice.Service, p *auth.Principal, req leaseservice.CreateRequest, n int) (created []*leaseservice.Lease, refused []error) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			l, err := replicas[i%len(replicas)].Create(t.Context(), p, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused = append(refused, err)
				return
			}
			created = append(created, l)
		})
	}
	close(start)
	wg.Wait()
	return created, refused
}

// activeOf returns the names of p's active leases of pool, from the API
// server.
func activeOf(t *testing.T, pool string, p *auth.Principal) []string {
	t.Helper()
	var out []string
	for _, l := range leasesOfPool(t, pool) {
		if l.Spec.Requester.Identity == p.Identity && l.Spec.Requester.Policy == p.Policy && lease.IsActive(&l) {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

func namesOf(ls []*leaseservice.Lease) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Object.Name)
	}
	slices.Sort(out)
	return out
}

// requireRefusals fails unless every error is want.
func requireRefusals(t *testing.T, errs []error, want error) {
	t.Helper()
	for _, err := range errs {
		// The API shows the text after the sentinel as the detail.
		if !errors.Is(err, want) || !strings.HasPrefix(err.Error(), want.Error()+": ") {
			t.Fatalf("refused with %q, want %q: <detail>", err, want)
		}
	}
}

// releaseAll releases p's leases through the replicas in turn.
func releaseAll(t *testing.T, replicas []*leaseservice.Service, p *auth.Principal, names []string) {
	t.Helper()
	for i, name := range names {
		if err := replicas[i%len(replicas)].Release(t.Context(), p, name); err != nil {
			t.Fatalf("releasing %s: %v", name, err)
		}
	}
}

// TestLimitExactAcrossReplicas: 20 concurrent requests of one caller with
// maxConcurrentLeases 3, spread over two replicas, end with exactly 3
// leases (Bound or Pending) and 17 refusals with the limit's reason, round
// after round (release the three, ask again).
func TestLimitExactAcrossReplicas(t *testing.T) {
	makePool(t, "exact", 2) // two bind at once, the rest wait
	replicas := []*leaseservice.Service{replica(t), replica(t)}
	p := caller("exact", kobev1.AccessRule{Pools: []string{"exact"}, MaxConcurrentLeases: ptr.To[int32](3)})
	for round := range 4 {
		created, refused := burst(t, replicas, p, leaseservice.CreateRequest{Pool: "exact"}, 20)
		requireRefusals(t, refused, leaseservice.ErrLeaseLimit)
		held := activeOf(t, "exact", p)
		if len(created) != 3 || len(refused) != 17 || !slices.Equal(namesOf(created), held) {
			t.Fatalf("round %d: %d created %v, %d refused, held %v; want exactly 3 created and held, 17 refused", round, len(created), namesOf(created), len(refused), held)
		}
		for _, l := range created {
			if ph := l.Object.Status.Phase; ph != kobev1.LeaseBound && ph != kobev1.LeasePending {
				t.Fatalf("round %d: lease %s answered %q, want Bound or Pending", round, l.Object.Name, ph)
			}
		}
		t.Logf("round %d: 3 admitted (%v), 17 refused, e.g. %v", round, held, refused[0])
		releaseAll(t, replicas, p, held)
	}
}

// TestLastSlotAcrossReplicas: with one slot left under the limit, two
// requests at once, one on each replica, admit exactly one, trial after
// trial: neither both (over the limit) nor none (a slot lost to the race).
func TestLastSlotAcrossReplicas(t *testing.T) {
	makePool(t, "last-slot", 0)
	replicas := []*leaseservice.Service{replica(t), replica(t)}
	p := caller("last-slot", kobev1.AccessRule{Pools: []string{"last-slot"}, MaxConcurrentLeases: ptr.To[int32](3)})
	req := leaseservice.CreateRequest{Pool: "last-slot"}
	for range 2 {
		if _, err := replicas[0].Create(t.Context(), p, req); err != nil {
			t.Fatal(err)
		}
	}
	for trial := range 15 {
		created, refused := burst(t, replicas, p, req, 2)
		requireRefusals(t, refused, leaseservice.ErrLeaseLimit)
		if held := activeOf(t, "last-slot", p); len(created) != 1 || len(held) != 3 {
			t.Fatalf("trial %d: %d admitted, %d held; want exactly the last slot taken", trial, len(created), len(held))
		}
		releaseAll(t, replicas, p, namesOf(created))
	}
	// The same for an alias: two requests for one free alias at once.
	q := caller("last-alias", kobev1.AccessRule{Pools: []string{"last-slot"}})
	for trial := range 15 {
		alias := fmt.Sprintf("alias-%d", trial)
		created, refused := burst(t, replicas, q, leaseservice.CreateRequest{Pool: "last-slot", Alias: alias}, 2)
		requireRefusals(t, refused, leaseservice.ErrAliasInUse)
		if len(created) != 1 {
			t.Fatalf("trial %d: %d leases with a free alias asked twice at once; want exactly one", trial, len(created))
		}
		releaseAll(t, replicas, q, namesOf(created))
	}
}

// TestAliasExactAcrossReplicas: concurrent requests for one alias, spread
// over two replicas, end with exactly one lease holding it, round after
// round; two aliases asked at once get one lease each.
func TestAliasExactAcrossReplicas(t *testing.T) {
	makePool(t, "alias-exact", 0)
	replicas := []*leaseservice.Service{replica(t), replica(t)}
	p := caller("alias-exact", kobev1.AccessRule{Pools: []string{"alias-exact"}})
	for round := range 3 {
		created, refused := burst(t, replicas, p, leaseservice.CreateRequest{Pool: "alias-exact", Alias: "the-one"}, 20)
		requireRefusals(t, refused, leaseservice.ErrAliasInUse)
		held := activeOf(t, "alias-exact", p)
		if len(created) != 1 || len(refused) != 19 || !slices.Equal(namesOf(created), held) {
			t.Fatalf("round %d: %d created %v, %d refused, held %v; want exactly one", round, len(created), namesOf(created), len(refused), held)
		}
		releaseAll(t, replicas, p, held)
	}

	// Two aliases at once, and a limit beside them: one lease per alias.
	q := caller("alias-pair", kobev1.AccessRule{Pools: []string{"alias-exact"}, MaxConcurrentLeases: ptr.To[int32](5)})
	var wg sync.WaitGroup
	var mu sync.Mutex
	byAlias := map[string]int{}
	for i := range 20 {
		alias := []string{"left", "right"}[i%2]
		wg.Go(func() {
			l, err := replicas[(i/2)%2].Create(t.Context(), q, leaseservice.CreateRequest{Pool: "alias-exact", Alias: alias})
			if err != nil && !errors.Is(err, leaseservice.ErrAliasInUse) {
				t.Errorf("alias %s: %v", alias, err)
			}
			if err == nil {
				mu.Lock()
				byAlias[l.Object.Labels[kobev1.LabelAlias]]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if byAlias["left"] != 1 || byAlias["right"] != 1 || len(activeOf(t, "alias-exact", q)) != 2 {
		t.Fatalf("leases per alias %v, active %v; want one each", byAlias, activeOf(t, "alias-exact", q))
	}
}

// TestQueueCapAcrossReplicas: a caller whose rule sets no limit may have at
// most MaxQueuedPerOwner leases waiting: 20 concurrent requests for an
// empty pool over two replicas leave exactly 10 Pending and 10 refused
// with ErrQueueLimit, and nothing of the refused ones. The cap does not
// stop a hand-out from a pool with a Ready member, nor a rule with its own
// limit, and a released waiting lease frees its slot.
func TestQueueCapAcrossReplicas(t *testing.T) {
	makePool(t, "queue-cap", 0)
	makePool(t, "queue-cap-ready", 1)
	replicas := []*leaseservice.Service{replica(t), replica(t)}
	p := caller("queue-cap", kobev1.AccessRule{Pools: []string{"queue-cap*"}})

	created, refused := burst(t, replicas, p, leaseservice.CreateRequest{Pool: "queue-cap"}, 20)
	requireRefusals(t, refused, leaseservice.ErrQueueLimit)
	waiting := activeOf(t, "queue-cap", p)
	if len(created) != leaseservice.DefaultMaxQueuedPerOwner || !slices.Equal(namesOf(created), waiting) {
		t.Fatalf("%d created %v, %d refused, waiting %v; want exactly %d", len(created), namesOf(created), len(refused), waiting, leaseservice.DefaultMaxQueuedPerOwner)
	}
	if all := leasesOfPool(t, "queue-cap"); len(all) != len(waiting) {
		t.Fatalf("%d leases in the pool, %d waiting: refused requests left leases behind", len(all), len(waiting))
	}
	t.Logf("10 waiting, 10 refused, e.g. %v", refused[0])

	l, err := replicas[0].Create(t.Context(), p, leaseservice.CreateRequest{Pool: "queue-cap-ready"})
	if err != nil || !l.Bound() {
		t.Fatalf("a hand-out with 10 leases waiting elsewhere: %v, %+v; want Bound", err, l)
	}
	if _, err := replicas[1].Create(t.Context(), p, leaseservice.CreateRequest{Pool: "queue-cap"}); !errors.Is(err, leaseservice.ErrQueueLimit) {
		t.Fatalf("an 11th waiting lease: %v, want ErrQueueLimit", err)
	}
	releaseAll(t, replicas, p, waiting[:1])
	if l, err := replicas[1].Create(t.Context(), p, leaseservice.CreateRequest{Pool: "queue-cap"}); err != nil || l.Bound() {
		t.Fatalf("after releasing a waiting lease: %v; want a Pending lease", err)
	}

	// A rule's own limit bounds its waiting leases instead of the cap.
	r := caller("queue-cap-limited", kobev1.AccessRule{Pools: []string{"queue-cap"}, MaxConcurrentLeases: ptr.To[int32](12)})
	created, refused = burst(t, replicas, r, leaseservice.CreateRequest{Pool: "queue-cap"}, 16)
	requireRefusals(t, refused, leaseservice.ErrLeaseLimit)
	if len(created) != 12 || len(activeOf(t, "queue-cap", r)) != 12 {
		t.Fatalf("limit 12: %d created, %d active; want 12", len(created), len(activeOf(t, "queue-cap", r)))
	}
}

// TestQueueCapOption: Options.MaxQueuedPerOwner sets the cap.
func TestQueueCapOption(t *testing.T) {
	makePool(t, "queue-cap-3", 0)
	s := replica(t, func(o *leaseservice.Options) { o.MaxQueuedPerOwner = 3 })
	p := caller("queue-cap-3", kobev1.AccessRule{Pools: []string{"queue-cap-3"}})
	for i := range 4 {
		_, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "queue-cap-3"})
		if want := i == 3; errors.Is(err, leaseservice.ErrQueueLimit) != want || (!want && err != nil) {
			t.Fatalf("request %d: %v; want ErrQueueLimit only for the 4th", i+1, err)
		}
	}
}

// failingLeaseCreates wraps a replica's client so that ClusterLease creates
// fail after the ledger write, as if the replica died there, and (when
// also) ledger writes fail from then on, so that its entry stays.
func failingLeaseCreates(t *testing.T, alsoLedger bool) client.Client {
	t.Helper()
	base, err := client.NewWithWatch(fx.env.Config, client.Options{Scheme: fx.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var dead bool
	var mu sync.Mutex
	return interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := obj.(*kobev1.ClusterLease); ok {
				dead = true
				return errors.New("replica died before creating the lease")
			}
			if _, ok := obj.(*corev1.ConfigMap); ok && dead && alsoLedger {
				return errors.New("replica is dead")
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			mu.Lock()
			d := dead
			mu.Unlock()
			if _, ok := obj.(*corev1.ConfigMap); ok && d && alsoLedger {
				return errors.New("replica is dead")
			}
			return c.Update(ctx, obj, opts...)
		},
	})
}

// TestDeadReplicaReservation (hostile): a replica that wrote a caller's
// reservation and died before creating the lease blocks that caller for
// ReservationGrace at most; a replica that only failed the create drops
// its reservation at once.
func TestDeadReplicaReservation(t *testing.T) {
	makePool(t, "dead-replica", 0)
	p := caller("dead-replica", kobev1.AccessRule{Pools: []string{"dead-replica"}, MaxConcurrentLeases: ptr.To[int32](1)})
	req := leaseservice.CreateRequest{Pool: "dead-replica"}

	failed := replica(t, func(o *leaseservice.Options) { o.Client = failingLeaseCreates(t, false) })
	if _, err := failed.Create(t.Context(), p, req); err == nil {
		t.Fatal("a create that fails was answered")
	}
	live := replica(t)
	l, err := live.Create(t.Context(), p, req)
	if err != nil {
		t.Fatalf("after a failed create whose reservation was dropped: %v, want a lease", err)
	}
	releaseAll(t, []*leaseservice.Service{live}, p, []string{l.Object.Name})

	dead := replica(t, func(o *leaseservice.Options) { o.Client = failingLeaseCreates(t, true) })
	diedAt := time.Now()
	if _, err := dead.Create(t.Context(), p, req); err == nil {
		t.Fatal("a create that fails was answered")
	}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	later := replica(t, func(o *leaseservice.Options) { o.Clock = clk })
	if _, err := later.Create(t.Context(), p, req); !errors.Is(err, leaseservice.ErrLeaseLimit) {
		t.Fatalf("within the grace of a dead replica's reservation: %v, want ErrLeaseLimit", err)
	}
	clk.SetTime(diedAt.Add(leaseservice.ReservationGrace + time.Second))
	if _, err := later.Create(t.Context(), p, req); err != nil {
		t.Fatalf("past the grace of a dead replica's reservation: %v, want a lease", err)
	}
	if _, err := later.Create(t.Context(), p, req); !errors.Is(err, leaseservice.ErrLeaseLimit) {
		t.Fatalf("the limit after the stale reservation expired: %v, want ErrLeaseLimit", err)
	}
}

// TestHangUpMidAdmission (hostile): a caller who hangs up right after its
// reservation is written still gets its lease created (the request cannot
// be cut there), counted once; it neither blocks the caller nor lets it
// past its limit.
func TestHangUpMidAdmission(t *testing.T) {
	makePool(t, "hang-up-admit", 0)
	p := caller("hang-up-admit", kobev1.AccessRule{Pools: []string{"hang-up-admit"}, MaxConcurrentLeases: ptr.To[int32](2)})
	ctx, hangUp := context.WithCancel(t.Context())
	defer hangUp()
	base, err := client.NewWithWatch(fx.env.Config, client.Options{Scheme: fx.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ledgerWritten := func(obj client.Object, err error) error {
		if _, ok := obj.(*corev1.ConfigMap); ok && err == nil {
			hangUp()
		}
		return err
	}
	hanging := replica(t, func(o *leaseservice.Options) {
		o.Client = interceptor.NewClient(base, interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				return ledgerWritten(obj, c.Create(ctx, obj, opts...))
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				return ledgerWritten(obj, c.Update(ctx, obj, opts...))
			},
		})
	})
	_, _ = hanging.Create(ctx, p, leaseservice.CreateRequest{Pool: "hang-up-admit"})
	if ctx.Err() == nil {
		t.Fatal("the ledger was never written")
	}
	first := activeOf(t, "hang-up-admit", p)
	if len(first) != 1 {
		t.Fatalf("after hanging up: active leases %v, want the one admitted", first)
	}
	created, refused := burst(t, []*leaseservice.Service{replica(t), replica(t)}, p, leaseservice.CreateRequest{Pool: "hang-up-admit"}, 10)
	requireRefusals(t, refused, leaseservice.ErrLeaseLimit)
	if held := activeOf(t, "hang-up-admit", p); len(created) != 1 || len(held) != 2 {
		t.Fatalf("then 10 requests: %d created, held %v; want 1 more, 2 in all", len(created), held)
	}
}

// TestLedgerJanitor: a ledger is deleted once nothing in it counts and its
// owner holds no active lease; not before.
func TestLedgerJanitor(t *testing.T) {
	makePool(t, "janitor", 0)
	s := replica(t)
	p := caller("janitor", kobev1.AccessRule{Pools: []string{"janitor"}, MaxConcurrentLeases: ptr.To[int32](2)})
	l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "janitor"})
	if err != nil {
		t.Fatal(err)
	}
	j := leaseservice.NewLedgerJanitor(leaseservice.Options{
		Namespace: ns, Client: fx.env.Client, Reader: fx.env.Client, APIReader: fx.env.Client, Log: logr.Discard(),
	}, time.Minute)
	key := client.ObjectKey{Namespace: ns, Name: leaseservice.LedgerName(leaseservice.RequesterHash(p))}
	exists := func() bool {
		err := fx.env.Client.Get(t.Context(), key, &corev1.ConfigMap{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	if !exists() {
		t.Fatal("no ledger after a limited lease")
	}
	if _, err := j.Sweep(t.Context()); err != nil || !exists() {
		t.Fatalf("sweep with an active lease: %v; the ledger must stay (exists %v)", err, exists())
	}
	releaseAll(t, []*leaseservice.Service{s}, p, []string{l.Object.Name})
	n, err := j.Sweep(t.Context())
	if err != nil || exists() || n < 1 {
		t.Fatalf("sweep after the last lease ended: %v, %d deleted, exists %v; want it deleted", err, n, exists())
	}
	// The next request starts a new ledger.
	if _, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "janitor"}); err != nil || !exists() {
		t.Fatalf("a request after the sweep: %v, ledger exists %v", err, exists())
	}
}

// TestWithdrawnLeaseTouchedMeanwhile: a lease refused by the cap on
// waiting leases is deleted only as created; if something (the lease
// controller, past its grace) changed it meanwhile, it is ended instead, so
// that a member it may hold is recycled, and the request is still refused.
func TestWithdrawnLeaseTouchedMeanwhile(t *testing.T) {
	makePool(t, "withdraw-touched", 0)
	base, err := client.NewWithWatch(fx.env.Config, client.Options{Scheme: fx.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var touched []string
	s := replica(t, func(o *leaseservice.Options) {
		o.MaxQueuedPerOwner = 1
		o.Client = interceptor.NewClient(base, interceptor.Funcs{
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if l, ok := obj.(*kobev1.ClusterLease); ok {
					live := leaseObject(t, l.Name)
					live.Status.Phase = kobev1.LeasePending
					if err := fx.env.Client.Status().Update(ctx, live); err != nil {
						return err
					}
					touched = append(touched, l.Name)
				}
				return c.Delete(ctx, obj, opts...)
			},
		})
	})
	p := caller("withdraw-touched", kobev1.AccessRule{Pools: []string{"withdraw-touched"}})
	req := leaseservice.CreateRequest{Pool: "withdraw-touched"}
	if _, err := s.Create(t.Context(), p, req); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(t.Context(), p, req); !errors.Is(err, leaseservice.ErrQueueLimit) {
		t.Fatalf("second waiting lease with a cap of 1: %v, want ErrQueueLimit", err)
	}
	if len(touched) != 1 {
		t.Fatalf("deletes of leases: %v, want the refused one", touched)
	}
	if l := leaseObject(t, touched[0]); l.Status.Phase != kobev1.LeaseReleased {
		t.Fatalf("the refused lease changed meanwhile is %q, want Released", l.Status.Phase)
	}
	if held := activeOf(t, "withdraw-touched", p); len(held) != 1 {
		t.Fatalf("active leases %v, want only the first", held)
	}
}

// TestLedgerJanitorLosesToAWrite (hostile): a ledger judged idle but
// written before the janitor's delete (a reservation in flight, which
// another replica must count) is not deleted: the delete is fenced by the
// resourceVersion that was judged.
func TestLedgerJanitorLosesToAWrite(t *testing.T) {
	makePool(t, "janitor-race", 0)
	s := replica(t)
	p := caller("janitor-race", kobev1.AccessRule{Pools: []string{"janitor-race"}, MaxConcurrentLeases: ptr.To[int32](2)})
	req := leaseservice.CreateRequest{Pool: "janitor-race"}
	l, err := s.Create(t.Context(), p, req)
	if err != nil {
		t.Fatal(err)
	}
	releaseAll(t, []*leaseservice.Service{s}, p, []string{l.Object.Name})

	base, err := client.NewWithWatch(fx.env.Config, client.Options{Scheme: fx.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var raced *leaseservice.Lease
	j := leaseservice.NewLedgerJanitor(leaseservice.Options{
		Namespace: ns, APIReader: fx.env.Client, Log: logr.Discard(),
		Client: interceptor.NewClient(base, interceptor.Funcs{
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if _, ok := obj.(*corev1.ConfigMap); ok && raced == nil {
					if raced, err = s.Create(ctx, p, req); err != nil {
						return err
					}
				}
				return c.Delete(ctx, obj, opts...)
			},
		}),
	}, time.Minute)
	n, err := j.Sweep(t.Context())
	if err != nil || raced == nil {
		t.Fatalf("sweep: %v, lease created meanwhile %v", err, raced)
	}
	key := client.ObjectKey{Namespace: ns, Name: leaseservice.LedgerName(leaseservice.RequesterHash(p))}
	if err := fx.env.Client.Get(t.Context(), key, &corev1.ConfigMap{}); err != nil || n != 0 {
		t.Fatalf("a ledger written after it was judged idle: %d deleted, %v; want it kept", n, err)
	}
}

// countingReader counts the leases the live lists it serves return.
type countingReader struct {
	client.Reader
	mu            sync.Mutex
	lists, leases int
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := r.Reader.List(ctx, list, opts...)
	if ls, ok := list.(*kobev1.ClusterLeaseList); ok && err == nil {
		r.mu.Lock()
		r.lists++
		r.leases += len(ls.Items)
		r.mu.Unlock()
	}
	return err
}

// TestAdmissionReadsNoEndedLeases: a caller under a lease limit (the
// default cap of 10 included) keeps its ended leases for --lease-retention,
// hundreds for a busy CI identity; the live list each admission makes of
// the caller's leases carries none of them (the API server filters on the
// CRD's selectable .status.phase), and the limit still counts exactly.
func TestAdmissionReadsNoEndedLeases(t *testing.T) {
	makePool(t, "history", 2)
	p := caller("history", kobev1.AccessRule{Pools: []string{"history"}, MaxConcurrentLeases: ptr.To[int32](2)})
	for i := range 40 {
		l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("history-ended-%d", i), Namespace: ns,
			Labels: map[string]string{kobev1.LabelRequesterHash: leaseservice.RequesterHash(p)}},
			Spec: kobev1.ClusterLeaseSpec{Pool: "history", Requester: kobev1.Requester{Identity: p.Identity, Policy: p.Policy, Method: p.Method}}}
		if err := fx.env.Client.Create(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		lease.End(l, kobev1.LeaseReleased, kobev1.ReasonReleased, "released", time.Now())
		if err := fx.env.Client.Status().Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	var counted *countingReader
	s := replica(t, func(o *leaseservice.Options) {
		counted = &countingReader{Reader: o.APIReader}
		o.APIReader = counted
	})
	var held []string
	for range 2 {
		l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "history"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l.Object.Name)
	}
	if _, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "history"}); !errors.Is(err, leaseservice.ErrLeaseLimit) {
		t.Fatalf("a third lease under a limit of 2: %v, want ErrLeaseLimit", err)
	}
	counted.mu.Lock()
	lists, leases := counted.lists, counted.leases
	counted.mu.Unlock()
	// Three admissions: 0, 1 and 2 active leases listed.
	if lists != 3 || leases != 3 {
		t.Errorf("the admissions listed %d leases in %d live lists; want 3 in 3 (the caller's 40 ended leases left out)", leases, lists)
	}
	// A lease released a moment ago has a young ledger entry and is not
	// listed any more: it must not count as a reservation in flight.
	if err := s.Release(t.Context(), p, held[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "history"}); err != nil {
		t.Errorf("a lease after a release under the limit: %v", err)
	}
}
