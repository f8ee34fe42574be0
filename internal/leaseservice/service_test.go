//go:build integration

package leaseservice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// caller is a principal of policy name whose one rule allows pools.
func caller(name string, rule kobev1.AccessRule) *auth.Principal {
	return &auth.Principal{Identity: name, Policy: name, Method: auth.MethodToken, Rule: rule}
}

// TestCreateGetExtendRelease walks one lease through the service: bound at
// once with a kubeconfig, read back, extended up to its limit, released
// twice (the second a no-op), and read as Released.
func TestCreateGetExtendRelease(t *testing.T) {
	makePool(t, "life", 1)
	s := newService()
	p := caller("life", kobev1.AccessRule{Pools: []string{"life"}, MaxExtensions: ptr.To[int32](1)})
	ctx := t.Context()

	l, err := s.Create(ctx, p, leaseservice.CreateRequest{Pool: "life", TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !l.Bound() || len(l.Kubeconfig) == 0 || l.QueuePosition != 0 || !l.Owned {
		t.Fatalf("created lease: phase %s, kubeconfig %d bytes, position %d", l.Object.Status.Phase, len(l.Kubeconfig), l.QueuePosition)
	}
	obj := waitRecorded(t, l.Object.Name)
	if !obj.Status.ExpiresAt.Equal(l.Object.Status.ExpiresAt) || obj.Status.InstanceRef.UID != l.Object.Status.InstanceRef.UID {
		t.Fatalf("the recorded bind %+v differs from the answer %+v", obj.Status, l.Object.Status)
	}
	if _, ok := obj.Annotations[kobev1.AnnotationQueuedAt]; !ok || obj.Labels[kobev1.LabelRequesterHash] != leaseservice.RequesterHash(p) {
		t.Fatalf("lease %s lacks its queued-at stamp or requester label: %v %v", obj.Name, obj.Annotations, obj.Labels)
	}

	got, err := s.Get(ctx, p, l.Object.Name)
	if err != nil || !got.Bound() || len(got.Kubeconfig) == 0 {
		t.Fatalf("Get: %v, %+v", err, got)
	}
	ext, err := s.Extend(ctx, p, l.Object.Name, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := obj.Status.ExpiresAt.Add(5 * time.Minute); !ext.Object.Status.ExpiresAt.Time.Equal(want) || len(ext.Kubeconfig) == 0 {
		t.Fatalf("extended to %v, want %v with a kubeconfig", ext.Object.Status.ExpiresAt, want)
	}
	if _, err := s.Extend(ctx, p, l.Object.Name, 5*time.Minute); !errors.Is(err, lease.ErrExtensionLimit) {
		t.Fatalf("second extension: %v, want ErrExtensionLimit", err)
	}
	if leaseObject(t, l.Object.Name).Status.Extensions != 1 {
		t.Fatal("the refused extension was counted")
	}
	for range 2 {
		if err := s.Release(ctx, p, l.Object.Name); err != nil {
			t.Fatal(err)
		}
	}
	if obj := leaseObject(t, l.Object.Name); obj.Status.Phase != kobev1.LeaseReleased || obj.Status.EndedAt == nil {
		t.Fatalf("after Release: %s", obj.Status.Phase)
	}
	if _, err := s.Extend(ctx, p, l.Object.Name, time.Minute); !errors.Is(err, lease.ErrNotBound) {
		t.Fatalf("extending a released lease: %v, want ErrNotBound", err)
	}
}

// TestPoolAuthorisation shows authorisation before any read: a pool the
// caller may not use is ErrPoolNotAllowed with the same message whether or
// not it exists; only an allowed pool can be ErrPoolNotFound.
func TestPoolAuthorisation(t *testing.T) {
	makePool(t, "secret-pool", 0)
	s := newService()
	p := caller("authz", kobev1.AccessRule{Pools: []string{"open-*"}})
	ctx := t.Context()
	for _, op := range []struct {
		name string
		do   func(pool string) error
	}{
		{"Create", func(pool string) error {
			_, err := s.Create(ctx, p, leaseservice.CreateRequest{Pool: pool})
			return err
		}},
		{"Pool", func(pool string) error { _, err := s.Pool(ctx, p, pool); return err }},
		{"ListPool", func(pool string) error { _, err := s.ListPool(ctx, p, pool); return err }},
	} {
		t.Run(op.name, func(t *testing.T) {
			a, b := op.do("secret-pool"), op.do("secret-pool-never")
			if !errors.Is(a, leaseservice.ErrPoolNotAllowed) || !errors.Is(b, leaseservice.ErrPoolNotAllowed) {
				t.Fatalf("got %v and %v, want ErrPoolNotAllowed for both", a, b)
			}
			if strings.ReplaceAll(a.Error(), "secret-pool", "P") != strings.ReplaceAll(b.Error(), "secret-pool-never", "P") {
				t.Fatalf("the errors tell an existing pool from a missing one: %q, %q", a, b)
			}
			if err := op.do("open-never"); !errors.Is(err, leaseservice.ErrPoolNotFound) {
				t.Fatalf("allowed missing pool: %v, want ErrPoolNotFound", err)
			}
			if err := op.do("Not_A_Name"); !errors.Is(err, leaseservice.ErrInvalid) {
				t.Fatalf("malformed pool name: %v, want ErrInvalid", err)
			}
		})
	}
	if got := leasesOfPool(t, "secret-pool"); len(got) != 0 {
		t.Fatalf("a refused request left %d leases", len(got))
	}
}

// TestUnavailable shows a pool being deleted refused at once with its
// cause, and no lease left queued.
func TestUnavailable(t *testing.T) {
	p := makePool(t, "doomed", 1, func(p *kobev1.ClusterPool) { p.Finalizers = []string{"kobe.kunobi.ninja/test-hold"} })
	if err := fx.env.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	s := newService()
	who := caller("doom", kobev1.AccessRule{Pools: []string{"doomed"}})
	testenv.Eventually(t, 15*time.Second, "the cache to see the deletion", func() error {
		var cached kobev1.ClusterPool
		if err := fx.mgr.GetClient().Get(t.Context(), clientKey("doomed"), &cached); err != nil {
			return err
		}
		if cached.DeletionTimestamp.IsZero() {
			return errors.New("no deletionTimestamp yet")
		}
		return nil
	})
	_, err := s.Create(t.Context(), who, leaseservice.CreateRequest{Pool: "doomed"})
	var u *leaseservice.UnavailableError
	if !errors.As(err, &u) || u.Cause != pool.CauseDeleting || !errors.Is(err, leaseservice.ErrPoolUnavailable) {
		t.Fatalf("Create in a pool being deleted: %v, want UnavailableError %s", err, pool.CauseDeleting)
	}
	if got := leasesOfPool(t, "doomed"); len(got) != 0 {
		t.Fatalf("a refused request left %d leases", len(got))
	}
}

// staleCache is a cache that has not seen any pool's status yet.
type staleCache struct{ client.Reader }

func (c staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if p, ok := obj.(*kobev1.ClusterPool); ok {
		p.Status = kobev1.ClusterPoolStatus{}
	}
	return nil
}

// TestUnavailableBeforeTheCacheKnows: the operator has said the pool's
// backend is unavailable, and the cache has not caught up: the request is
// refused all the same, and leaves no lease.
func TestUnavailableBeforeTheCacheKnows(t *testing.T) {
	p := makePool(t, "nobackend", 0)
	ctx := t.Context()
	p.Status.ObservedGeneration = p.Generation
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionCapacity, Status: metav1.ConditionFalse, Reason: kobev1.ReasonBackendUnavailable,
		Message: "no such backend here", ObservedGeneration: p.Generation,
	})
	if err := fx.env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	s := newService(func(o *leaseservice.Options) { o.Reader = staleCache{fx.mgr.GetClient()} })
	who := caller("nobackend", kobev1.AccessRule{Pools: []string{"nobackend"}})
	_, err := s.Create(ctx, who, leaseservice.CreateRequest{Pool: "nobackend"})
	var u *leaseservice.UnavailableError
	if !errors.As(err, &u) || u.Cause != pool.CauseBackendUnavailable {
		t.Fatalf("Create in a pool whose backend is unavailable, cache behind: %v, want UnavailableError %s", err, pool.CauseBackendUnavailable)
	}
	if got := leasesOfPool(t, "nobackend"); len(got) != 0 {
		t.Fatalf("a refused request left %d leases", len(got))
	}
}

// TestOtherCallersLease shows that another caller's lease does not exist
// for Get and Extend, and that its Release succeeds without touching it.
func TestOtherCallersLease(t *testing.T) {
	makePool(t, "shared", 1)
	s := newService()
	rule := kobev1.AccessRule{Pools: []string{"shared"}}
	owner, stranger := caller("owner", rule), caller("stranger", rule)
	// Same identity under another policy is another caller.
	impostor := &auth.Principal{Identity: "owner", Policy: "elsewhere", Method: auth.MethodToken, Rule: rule}
	l, err := s.Create(t.Context(), owner, leaseservice.CreateRequest{Pool: "shared", Alias: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	before := waitRecorded(t, l.Object.Name)
	for _, p := range []*auth.Principal{stranger, impostor} {
		for _, ref := range []string{l.Object.Name, "mine"} {
			if _, err := s.Get(t.Context(), p, ref); !errors.Is(err, leaseservice.ErrLeaseNotFound) {
				t.Fatalf("%s/%s Get %s: %v, want ErrLeaseNotFound", p.Policy, p.Identity, ref, err)
			}
			if _, err := s.Extend(t.Context(), p, ref, time.Minute); !errors.Is(err, leaseservice.ErrLeaseNotFound) {
				t.Fatalf("%s/%s Extend %s: %v, want ErrLeaseNotFound", p.Policy, p.Identity, ref, err)
			}
			if err := s.Release(t.Context(), p, ref); err != nil {
				t.Fatalf("%s/%s Release %s: %v, want nil", p.Policy, p.Identity, ref, err)
			}
		}
		if ls, err := s.List(t.Context(), p, leaseservice.ListFilter{}); err != nil || len(ls) != 0 {
			t.Fatalf("%s/%s List: %v, %d leases; want none", p.Policy, p.Identity, err, len(ls))
		}
	}
	after := leaseObject(t, l.Object.Name)
	if after.Status.Phase != kobev1.LeaseBound || after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("the owner's lease changed: %s, resourceVersion %s -> %s", after.Status.Phase, before.ResourceVersion, after.ResourceVersion)
	}
	if _, err := s.Get(t.Context(), owner, "NOT_VALID"); !errors.Is(err, leaseservice.ErrInvalid) {
		t.Fatalf("malformed ref: %v, want ErrInvalid", err)
	}
	if err := s.Release(t.Context(), owner, "NOT_VALID"); !errors.Is(err, leaseservice.ErrInvalid) {
		t.Fatalf("malformed ref on Release: %v, want ErrInvalid", err)
	}
}

// TestLimitsAcrossReplicas sends concurrent requests of one caller through
// two services with separate in-process locks, as two operator replicas:
// the caller never holds more than its limit of active leases, nor two
// active leases with one alias, and every success is a lease that stays.
func TestLimitsAcrossReplicas(t *testing.T) {
	makePool(t, "burst", 0) // no members: every lease stays Pending
	replicas := []*leaseservice.Service{newService(), newService()}
	run := func(p *auth.Principal, req leaseservice.CreateRequest, n int) (ok []string, refused []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				l, err := replicas[i%2].Create(t.Context(), p, req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err)
					return
				}
				ok = append(ok, l.Object.Name)
			})
		}
		close(start)
		wg.Wait()
		return ok, refused
	}
	active := func(p *auth.Principal, alias string) []string {
		var out []string
		for _, l := range leasesOfPool(t, "burst") {
			if l.Spec.Requester.Identity == p.Identity && lease.IsActive(&l) && (alias == "" || l.Labels[kobev1.LabelAlias] == alias) {
				out = append(out, l.Name)
			}
		}
		return out
	}

	t.Run("concurrent lease limit", func(t *testing.T) {
		p := caller("limited", kobev1.AccessRule{Pools: []string{"burst"}, MaxConcurrentLeases: ptr.To[int32](3)})
		ok, refused := run(p, leaseservice.CreateRequest{Pool: "burst"}, 16)
		for _, err := range refused {
			if !errors.Is(err, leaseservice.ErrLeaseLimit) {
				t.Fatalf("unexpected refusal: %v", err)
			}
		}
		held := active(p, "")
		if len(held) > 3 || len(ok) != len(held) || len(ok) == 0 {
			t.Fatalf("%d created, %d held (%v); want the same number, 1 to 3", len(ok), len(held), held)
		}
	})
	t.Run("alias", func(t *testing.T) {
		p := caller("aliased", kobev1.AccessRule{Pools: []string{"burst"}})
		ok, refused := run(p, leaseservice.CreateRequest{Pool: "burst", Alias: "the-one"}, 12)
		for _, err := range refused {
			if !errors.Is(err, leaseservice.ErrAliasInUse) {
				t.Fatalf("unexpected refusal: %v", err)
			}
		}
		held := active(p, "the-one")
		if len(held) > 1 || len(ok) != len(held) {
			t.Fatalf("%d created, %d hold the alias (%v); want at most one, and the same", len(ok), len(held), held)
		}
	})
}

// TestQueuePositions shows List and ListPool reporting each Pending lease's
// live place in its pool's queue.
func TestQueuePositions(t *testing.T) {
	makePool(t, "line", 0)
	s := newService()
	p := caller("waiter", kobev1.AccessRule{Pools: []string{"line"}})
	var names []string
	for i := range 3 {
		l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "line"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Bound() || l.QueuePosition != int32(i+1) {
			t.Fatalf("lease %d: phase %s at %d, want Pending at %d", i, l.Object.Status.Phase, l.QueuePosition, i+1)
		}
		// Marked as the lease controller would mark it, in one write: the
		// controller then has nothing to add.
		stored := &kobev1.ClusterLease{}
		if err := fx.env.Client.Get(t.Context(), client.ObjectKeyFromObject(l.Object), stored); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(stored.Status.Conditions, kobev1.ConditionBound)
		if stored.Status.Phase != kobev1.LeasePending || stored.Status.QueuePosition != int32(i+1) || c == nil || c.Reason != kobev1.ReasonQueued ||
			c.Message != lease.QueuedCondition(stored, int32(i+1)).Message {
			t.Fatalf("lease %d as stored: phase %s at %d, Bound condition %+v; want Pending at %d, Queued", i, stored.Status.Phase, stored.Status.QueuePosition, c, i+1)
		}
		names = append(names, l.Object.Name)
	}
	want := map[string]int32{names[0]: 1, names[1]: 2, names[2]: 3}
	testenv.Eventually(t, 15*time.Second, "positions 1, 2, 3 in List and ListPool", func() error {
		mine, err := s.List(t.Context(), p, leaseservice.ListFilter{})
		if err != nil {
			return err
		}
		all, err := s.ListPool(t.Context(), p, "line")
		if err != nil {
			return err
		}
		for _, ls := range [][]leaseservice.Lease{mine, all} {
			if len(ls) != 3 {
				return fmt.Errorf("%d leases listed, want 3", len(ls))
			}
			for _, l := range ls {
				if l.QueuePosition != want[l.Object.Name] || !l.Owned {
					return fmt.Errorf("positions %v, want %v", positions(ls), want)
				}
			}
		}
		return nil
	})
}

func positions(ls []leaseservice.Lease) map[string]int32 {
	out := map[string]int32{}
	for _, l := range ls {
		out[l.Object.Name] = l.QueuePosition
	}
	return out
}

// TestNewRequestsBindPastAWaitingLeaseOnlyWhenMembersSuffice: a lease
// waiting in the queue does not make a new request queue when the pool has
// a Ready member for the waiting lease and one more; with only the one it
// does (first come, first served).
func TestNewRequestsBindPastAWaitingLeaseOnlyWhenMembersSuffice(t *testing.T) {
	for _, tc := range []struct {
		pool      string
		members   int
		wantBound bool
	}{
		{pool: "ahead-enough", members: 2, wantBound: true},
		{pool: "ahead-short", members: 1, wantBound: false},
	} {
		t.Run(tc.pool, func(t *testing.T) {
			makePool(t, tc.pool, tc.members)
			waiting := &kobev1.ClusterLease{
				ObjectMeta: metav1.ObjectMeta{Name: tc.pool + "-waiting", Namespace: ns, Labels: map[string]string{kobev1.LabelPool: tc.pool}},
				Spec:       kobev1.ClusterLeaseSpec{Pool: tc.pool, TTL: &metav1.Duration{Duration: time.Hour}},
			}
			if err := fx.env.Client.Create(t.Context(), waiting); err != nil {
				t.Fatal(err)
			}
			waiting.Status.Phase = kobev1.LeasePending
			if err := fx.env.Client.Status().Update(t.Context(), waiting); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 15*time.Second, "the cache to see the waiting lease", func() error {
				var got kobev1.ClusterLease
				if err := fx.mgr.GetClient().Get(t.Context(), clientKey(waiting.Name), &got); err != nil {
					return err
				}
				if got.Status.Phase != kobev1.LeasePending {
					return fmt.Errorf("phase %q", got.Status.Phase)
				}
				return nil
			})
			l, err := newService().Create(t.Context(), caller("late", kobev1.AccessRule{Pools: []string{tc.pool}}), leaseservice.CreateRequest{Pool: tc.pool})
			if err != nil {
				t.Fatal(err)
			}
			if l.Bound() != tc.wantBound {
				t.Errorf("with %d Ready members and one lease waiting: bound %v (position %d), want bound %v", tc.members, l.Bound(), l.QueuePosition, tc.wantBound)
			}
			if !tc.wantBound && l.QueuePosition != 2 {
				t.Errorf("queued at %d, want 2 (behind the waiting lease)", l.QueuePosition)
			}
		})
	}
}
