package clusterpool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/controller/conditions"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

func TestCreateBatches(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, nil},
		{1, []int{1}},
		{2, []int{1, 1}},
		{3, []int{1, 2}},
		{7, []int{1, 2, 4}},
		{10, []int{1, 2, 4, 3}},
		{31, []int{1, 2, 4, 8, 16}},
		{64, []int{1, 2, 4, 8, 16, 16, 16, 1}},
	} {
		got := createBatches(tc.n)
		if !slices.Equal(got, tc.want) {
			t.Errorf("createBatches(%d) = %v, want %v", tc.n, got, tc.want)
		}
		sum := 0
		for _, b := range got {
			sum += b
			if b > createBatchMax {
				t.Errorf("createBatches(%d): a batch of %d, above createBatchMax %d", tc.n, b, createBatchMax)
			}
		}
		if sum != tc.n {
			t.Errorf("createBatches(%d) covers %d creates", tc.n, sum)
		}
	}
}

// createCounter is a fake client whose creates take a while and may be
// refused, counting the creates tried and the most in flight at once.
type createCounter struct {
	tried, inFlight, maxInFlight atomic.Int32
	// refuse says whether the n-th create (from 1) is refused.
	refuse func(n int32) bool
}

func (c *createCounter) client(t *testing.T) client.Client {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			n := c.tried.Add(1)
			now := c.inFlight.Add(1)
			defer c.inFlight.Add(-1)
			for old := c.maxInFlight.Load(); now > old && !c.maxInFlight.CompareAndSwap(old, now); old = c.maxInFlight.Load() {
			}
			// Long enough that the creates of one batch overlap however
			// the goroutines are scheduled.
			time.Sleep(50 * time.Millisecond)
			if c.refuse != nil && c.refuse(n) {
				return apierrors.NewForbidden(schema.GroupResource{Group: kobev1.GroupVersion.Group, Resource: "clusterinstances"}, obj.GetName(), errQuota)
			}
			return cl.Create(ctx, obj, opts...)
		},
	}).Build()
}

var errQuota = errors.New("exceeded quota")

func createScope(n int) *scope { return createScopeOf("fill", n) }

func createScopeOf(name string, n int) *scope {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid")},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To(int32(n)), Backend: kobev1.BackendSpec{Type: kobev1.BackendSim}}}
	plan := pool.Plan{TemplateHash: pool.TemplateHash(&p.Spec), MemberBackend: p.Spec.Backend, Target: int32(n)}
	for i := range n {
		plan.Create = append(plan.Create, int32(i))
	}
	return &scope{pool: p, plan: plan, conds: conditions.Setter{Now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}}
}

// TestCreateMembersInParallel: a plan of 40 members is created in batches
// of up to createBatchMax at once, every member exactly once, and each is
// expected in the cache.
func TestCreateMembersInParallel(t *testing.T) {
	cc := &createCounter{}
	c := cc.client(t)
	r := &Reconciler{Client: c}
	s := createScope(40)
	if err := r.createMembers(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	var list kobev1.ClusterInstanceList
	if err := c.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 40 || cc.tried.Load() != 40 {
		t.Errorf("%d members exist after %d creates, want 40 and 40", len(list.Items), cc.tried.Load())
	}
	if got := cc.maxInFlight.Load(); got < 2 || got > createBatchMax {
		t.Errorf("at most %d creates in flight at once, want 2..%d", got, createBatchMax)
	}
	if ok, _ := r.expected.seen(s.pool.UID, nil, s.conds.Now); ok {
		t.Error("the created members are not expected in the cache")
	}
	if ok, _ := r.expected.seen(s.pool.UID, list.Items, s.conds.Now); !ok {
		t.Error("the cache shows every created member, but the pool still waits for it")
	}
}

// TestCreatesBoundedAcrossPools: pools filling at once share the replica's
// create slots: never more than createsInFlightMax creates in flight.
func TestCreatesBoundedAcrossPools(t *testing.T) {
	cc := &createCounter{}
	r := &Reconciler{Client: cc.client(t)}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = r.createMembers(t.Context(), createScopeOf(fmt.Sprintf("pool-%d", i), 31)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if cc.tried.Load() != 4*31 {
		t.Errorf("%d creates, want %d", cc.tried.Load(), 4*31)
	}
	if got := cc.maxInFlight.Load(); got > createsInFlightMax || got < 2 {
		t.Errorf("at most %d creates in flight at once across 4 pools, want 2..%d", got, createsInFlightMax)
	}
}

// TestCreateMembersStopsAtARefusal: creates that the API server refuses end
// the step after the batch they were in, and the members created before
// are recorded: a quota that refuses every create sees one.
func TestCreateMembersStopsAtARefusal(t *testing.T) {
	for _, tc := range []struct {
		name        string
		refuse      func(n int32) bool
		wantTried   int32
		wantCreated int
	}{
		{"every create refused", func(int32) bool { return true }, 1, 0},
		// Batches 1, 2, 4: the fifth create is in the third.
		{"the fifth refused", func(n int32) bool { return n == 5 }, 7, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := &createCounter{refuse: tc.refuse}
			c := cc.client(t)
			r := &Reconciler{Client: c}
			s := createScope(40)
			err := r.createMembers(t.Context(), s)
			if !apierrors.IsForbidden(err) {
				t.Fatalf("createMembers = %v, want the refusal", err)
			}
			var list kobev1.ClusterInstanceList
			if err := c.List(t.Context(), &list); err != nil {
				t.Fatal(err)
			}
			if cc.tried.Load() != tc.wantTried || len(list.Items) != tc.wantCreated {
				t.Errorf("%d creates tried, %d members exist; want %d and %d", cc.tried.Load(), len(list.Items), tc.wantTried, tc.wantCreated)
			}
			got := 0
			if pd := r.expected.pools[s.pool.UID]; pd != nil {
				got = len(pd.created)
			}
			if got != tc.wantCreated {
				t.Errorf("%d creates expected in the cache, want %d", got, tc.wantCreated)
			}
		})
	}
}
