package leaseservice

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// TestEntryLeasesReadsOnlyTheEntries: counting queue slots reads the
// entries' leases, from the cache first, and never lists the owner's
// leases live (an owner keeps hundreds of ended ones); only an entry old
// enough that its lease must exist, yet missing from the cache, is read
// live.
func TestEntryLeasesReadsOnlyTheEntries(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	scheme := runtime.NewScheme()
	if err := kobev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	o := ledgerOwner{policy: "ci", identity: "repo:kunobi/kobe"}
	mk := func(name string, phase kobev1.LeasePhase, identity string) *kobev1.ClusterLease {
		l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kobe"}}
		l.Spec.Requester = kobev1.Requester{Policy: o.policy, Identity: identity}
		l.Status.Phase = phase
		return l
	}
	cached := []client.Object{mk("in-cache", kobev1.LeasePending, o.identity), mk("not-ours", kobev1.LeasePending, "someone-else")}
	live := []client.Object{mk("in-cache", kobev1.LeaseBound, o.identity), mk("not-ours", kobev1.LeasePending, "someone-else"), mk("created-long-ago", kobev1.LeasePending, o.identity)}
	for i := range 300 {
		live = append(live, mk(fmt.Sprintf("ended-%d", i), kobev1.LeaseReleased, o.identity))
	}
	var liveGets []string
	liveLists := 0
	apiReader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(live...).WithStatusSubresource(&kobev1.ClusterLease{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				liveGets = append(liveGets, key.Name)
				return c.Get(ctx, key, obj, opts...)
			},
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				liveLists++
				return c.List(ctx, list, opts...)
			},
		}).Build()
	s := &Service{opts: Options{
		Namespace: "kobe",
		Reader:    fake.NewClientBuilder().WithScheme(scheme).WithObjects(cached...).Build(),
		APIReader: apiReader,
		Clock:     clocktesting.NewFakeClock(now),
	}}
	young, old := now.Add(-time.Second), now.Add(-ReservationGrace)
	led := ledger{entries: map[string]ledgerEntry{
		"in-cache":         {At: old, Queued: true},
		"not-ours":         {At: old, Queued: true},
		"in-flight":        {At: young, Queued: true},
		"created-long-ago": {At: old, Queued: true},
		"never-created":    {At: old, Queued: true},
	}}
	got, err := s.entryLeases(t.Context(), o, led)
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]kobev1.LeasePhase{}
	for _, l := range got {
		phases[l.Name] = l.Status.Phase
	}
	want := map[string]kobev1.LeasePhase{"in-cache": kobev1.LeasePending, "created-long-ago": kobev1.LeasePending}
	if fmt.Sprint(phases) != fmt.Sprint(want) {
		t.Errorf("entryLeases = %v, want %v (the cache's view of in-cache; another owner's lease left out)", phases, want)
	}
	slices.Sort(liveGets)
	if liveLists != 0 || !slices.Equal(liveGets, []string{"created-long-ago", "never-created"}) {
		t.Errorf("live reads: %d lists, gets %v; want no list and gets of the two old entries the cache lacks", liveLists, liveGets)
	}
	// What the queue cap sees: the cached lease still queued (a moment too
	// long, never too short), the in-flight entry, the old one's lease.
	if tl := count(led.entries, got, "", now); tl.queued != 3 || len(tl.keep) != 3 {
		t.Errorf("count = queued %d, keep %v; want 3 and 3", tl.queued, tl.keep)
	}
}

// TestOwnedLeasesOnAnOlderCRD: a ClusterLease CRD from before .status.phase
// was a selectable field makes the API server refuse the selector (400);
// the listing then falls back to all of the owner's leases rather than
// failing every admission under a limit.
func TestOwnedLeasesOnAnOlderCRD(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kobev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	o := ledgerOwner{policy: "ci", identity: "repo:kunobi/kobe"}
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "kobe", Labels: map[string]string{kobev1.LabelRequesterHash: o.hash()}}}
	l.Spec.Requester = kobev1.Requester{Policy: o.policy, Identity: o.identity}
	var selectors []string
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(l).
		WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				lo := (&client.ListOptions{}).ApplyOptions(opts)
				if lo.FieldSelector != nil {
					selectors = append(selectors, lo.FieldSelector.String())
					return apierrors.NewBadRequest(`Unable to find "kobe.kunobi.ninja/v1alpha1, Resource=clusterleases" that match label selector "", field selector "status.phase!=Released": field label not supported: status.phase`)
				}
				selectors = append(selectors, "")
				return c.List(ctx, list, opts...)
			},
		}).Build()
	s := &Service{opts: Options{Namespace: "kobe", APIReader: reader}}
	got, err := s.ownedLeases(t.Context(), o)
	if err != nil || len(got) != 1 || got[0].Name != "mine" {
		t.Fatalf("ownedLeases = %v, %v; want the owner's lease", got, err)
	}
	if len(selectors) != 2 || !strings.Contains(selectors[0], "status.phase!=Released") || selectors[1] != "" {
		t.Errorf("lists made with field selectors %q; want the filtered one, then the plain one", selectors)
	}
}
