//go:build integration

package leaseservice_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// held is a leaseservice.Options.Defer that keeps the work that follows a
// hand-out's answer until the test releases it.
type held struct {
	mu    sync.Mutex
	works []func()
}

func (h *held) defer_(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.works = append(h.works, f)
}

func (h *held) release() int {
	h.mu.Lock()
	works := h.works
	h.works = nil
	h.mu.Unlock()
	for _, f := range works {
		f()
	}
	return len(works)
}

// writeKey is one kind of write as kube-apiserver counts it.
type writeKey struct{ group, resource, subresource, verb string }

func (k writeKey) String() string {
	r := k.resource
	if k.subresource != "" {
		r += "/" + k.subresource
	}
	if k.group != "" && k.group != kobev1.GroupVersion.Group {
		r = k.group + "/" + r
	}
	return r + " " + k.verb
}

// apiWrites reads kube-apiserver's own apiserver_request_total and sums the
// writes (POST, PUT, PATCH, DELETE and their kin) on any resource over
// status codes. kube-apiserver's own heartbeats (its identity Lease in
// coordination.k8s.io, renewed every few seconds) are left out: nothing
// kobe does writes that resource.
func apiWrites(t *testing.T, rc rest.Interface) map[writeKey]float64 {
	t.Helper()
	raw, err := rc.Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading kube-apiserver /metrics: %v", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing kube-apiserver /metrics: %v", err)
	}
	f, ok := fams["apiserver_request_total"]
	if !ok {
		t.Fatal("kube-apiserver /metrics has no apiserver_request_total")
	}
	out := map[writeKey]float64{}
	for _, m := range f.GetMetric() {
		var k writeKey
		for _, lp := range m.GetLabel() {
			switch lp.GetName() {
			case "group":
				k.group = lp.GetValue()
			case "resource":
				k.resource = lp.GetValue()
			case "subresource":
				k.subresource = lp.GetValue()
			case "verb":
				k.verb = lp.GetValue()
			}
		}
		switch k.verb {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		default:
			continue
		}
		if k.group == "coordination.k8s.io" && k.resource == "leases" {
			continue
		}
		out[k] += m.GetCounter().GetValue()
	}
	return out
}

func diffWrites(before, after map[writeKey]float64) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := int(v - before[k]); d != 0 {
			out[k.String()] = d
		}
	}
	return out
}

// quiet waits until nothing writes to the API server for a moment (Events
// and deferred work of earlier tests), and returns the counters then.
func quiet(t *testing.T, rc rest.Interface) map[writeKey]float64 {
	t.Helper()
	var last map[writeKey]float64
	testenv.Eventually(t, 20*time.Second, "the API server to see no writes for 500ms", func() error {
		cur := apiWrites(t, rc)
		if last != nil && maps.Equal(last, cur) {
			return nil
		}
		last = cur
		time.Sleep(500 * time.Millisecond)
		return errors.New("writes are still coming in")
	})
	return last
}

func metricsClient(t *testing.T) rest.Interface {
	t.Helper()
	cfg := rest.CopyConfig(fx.env.Config)
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs.CoreV1().RESTClient()
}

// TestHandOutCostsTwoWrites: a hand-out answered Bound, with its
// kubeconfig, costs exactly two API writes before the answer, counted from
// the API server's own metrics: the ClusterLease create and the member's
// claim. The lease's status copy, Events and metrics come after the answer
// (held here by the Defer hook); once released, the status copy appears
// with expiresAt = the member's boundAt + ttl. An alias or a concurrency
// limit costs one more write before the lease's create, the caller's
// ledger (exact on every replica); a caller with neither pays
// nothing for it.
func TestHandOutCostsTwoWrites(t *testing.T) {
	rc := metricsClient(t)
	cases := []struct {
		name   string
		rule   kobev1.AccessRule
		alias  string
		ledger bool
	}{
		{"token caller, no limit, no alias", kobev1.AccessRule{}, "", false},
		{"with an alias", kobev1.AccessRule{}, "my-cluster", true},
		{"with maxConcurrentLeases", kobev1.AccessRule{MaxConcurrentLeases: ptr.To[int32](3)}, "", true},
	}
	for i, c := range cases {
		want := map[string]int{"clusterleases POST": 1, "clusterinstances PUT": 1}
		if c.ledger {
			want["configmaps POST"] = 1 // the caller's first lease creates its ledger
		}
		t.Run(c.name, func(t *testing.T) {
			poolName := fmt.Sprintf("two-writes-%d", i)
			makePool(t, poolName, 1)
			h := &held{}
			s := newService(func(o *leaseservice.Options) { o.Defer = h.defer_ })
			c.rule.Pools = []string{poolName}
			p := caller(fmt.Sprintf("counted-%d", i), c.rule)

			before := quiet(t, rc)
			start := time.Now()
			l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: poolName, TTL: 20 * time.Minute, Alias: c.alias})
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			after := apiWrites(t, rc)
			if !l.Bound() || len(l.Kubeconfig) == 0 {
				t.Fatalf("answer: phase %s, kubeconfig %d bytes; want Bound with a kubeconfig", l.Object.Status.Phase, len(l.Kubeconfig))
			}
			got := diffWrites(before, after)
			t.Logf("hand-out answered in %s with writes %v", took, got)
			if !maps.Equal(got, want) {
				t.Fatalf("writes before the answer: %v, want exactly %v", got, want)
			}
			if obj := leaseObject(t, l.Object.Name); obj.Status.Phase != "" {
				t.Fatalf("the lease's status was written before the answer: %+v", obj.Status)
			}

			if n := h.release(); n != 1 {
				t.Fatalf("%d pieces of deferred work, want 1", n)
			}
			obj := waitRecorded(t, l.Object.Name)
			inst := &kobev1.ClusterInstance{}
			if err := fx.env.Client.Get(t.Context(), clientKey(obj.Status.InstanceRef.Name), inst); err != nil {
				t.Fatal(err)
			}
			if !binding.Consistent(obj, inst) || inst.Spec.LeaseRef.BoundAt == nil {
				t.Fatalf("member %s leaseRef %+v, lease status %+v: the two sides disagree", inst.Name, inst.Spec.LeaseRef, obj.Status)
			}
			if want := inst.Spec.LeaseRef.BoundAt.Add(20 * time.Minute); !obj.Status.ExpiresAt.Time.Equal(want) || !obj.Status.ExpiresAt.Equal(l.Object.Status.ExpiresAt) {
				t.Fatalf("expiresAt %s (answered %s), want boundAt + ttl = %s", obj.Status.ExpiresAt, l.Object.Status.ExpiresAt, want)
			}
			t.Logf("after the answer: %v", diffWrites(after, apiWrites(t, rc)))
		})
	}
}

// TestClaimBudgetWithinInFlightGrace: the lease controller leaves a new
// lease to the fast path for lease.InFlightGrace; the fast path claims
// within ClaimBudget of the same moment. The grace must be the longer, with
// room for clock skew between replicas, or both could claim a member for
// one lease.
func TestClaimBudgetWithinInFlightGrace(t *testing.T) {
	if margin := lease.InFlightGrace - leaseservice.ClaimBudget; margin < time.Second {
		t.Fatalf("InFlightGrace %s leaves %s after ClaimBudget %s, want at least 1s", lease.InFlightGrace, margin, leaseservice.ClaimBudget)
	}
}

// kubeconfigMember returns the member a lease kubeconfig points at (its
// cluster's name) and the lease it was minted for (its user's name).
func kubeconfigMember(t *testing.T, kc []byte) (member, leaseName string) {
	t.Helper()
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatalf("parsing a returned kubeconfig: %v", err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil {
		t.Fatalf("kubeconfig has no current context")
	}
	return ctx.Cluster, ctx.AuthInfo
}

// TestHangUpsNeverLeakACredential replays the hang-up attack at service
// level: 60 lease requests against a pool of 4 Ready members whose callers
// hang up 5-60 ms in, then a GET of every lease. Every kubeconfig returned
// (by a POST that got its answer out, or by a GET) names a member whose
// write-once leaseRef, read live, names that lease, so no member a
// kubeconfig names is ever bound to another lease; and no member is named by
// two leases' kubeconfigs.
func TestHangUpsNeverLeakACredential(t *testing.T) {
	makePool(t, "hangup", 4)
	s := newService()
	p := caller("hangup", kobev1.AccessRule{Pools: []string{"hangup"}})

	type minted struct{ lease, member, via string }
	var mu sync.Mutex
	var kcs []minted
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(5+rand.IntN(56))*time.Millisecond)
			defer cancel()
			l, err := s.Create(ctx, p, leaseservice.CreateRequest{Pool: "hangup"})
			if err != nil || len(l.Kubeconfig) == 0 {
				return
			}
			m, u := kubeconfigMember(t, l.Kubeconfig)
			mu.Lock()
			kcs = append(kcs, minted{lease: u, member: m, via: "POST"})
			mu.Unlock()
		})
	}
	wg.Wait()

	ls := leasesOfPool(t, "hangup")
	for _, l := range ls {
		got, err := s.Get(t.Context(), p, l.Name)
		if err != nil {
			t.Fatalf("GET %s: %v", l.Name, err)
		}
		if len(got.Kubeconfig) > 0 {
			m, u := kubeconfigMember(t, got.Kubeconfig)
			if u != l.Name {
				t.Fatalf("GET %s returned a kubeconfig for lease %s", l.Name, u)
			}
			kcs = append(kcs, minted{lease: u, member: m, via: "GET"})
		}
	}
	uids := map[string]string{}
	for _, l := range ls {
		uids[l.Name] = string(l.UID)
	}
	holder := map[string]string{} // member -> the lease its kubeconfigs were for
	for _, k := range kcs {
		inst := &kobev1.ClusterInstance{}
		if err := fx.mgr.GetAPIReader().Get(t.Context(), clientKey(k.member), inst); err != nil {
			t.Fatalf("member %s of a returned kubeconfig: %v", k.member, err)
		}
		if inst.Spec.LeaseRef == nil || string(inst.Spec.LeaseRef.UID) != uids[k.lease] {
			t.Errorf("%s returned a kubeconfig of lease %s for member %s, whose leaseRef is %+v", k.via, k.lease, k.member, inst.Spec.LeaseRef)
		}
		if prev, ok := holder[k.member]; ok && prev != k.lease {
			t.Errorf("member %s has kubeconfigs for two leases: %s and %s", k.member, prev, k.lease)
		}
		holder[k.member] = k.lease
	}
	bound := 0
	var insts kobev1.ClusterInstanceList
	if err := fx.mgr.GetAPIReader().List(t.Context(), &insts, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: "hangup"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range insts.Items {
		if m.Spec.LeaseRef != nil {
			bound++
		}
	}
	t.Logf("%d leases created of 60 requests, %d kubeconfigs returned (%d members bound of 4)", len(ls), len(kcs), bound)
	// Each lease a caller got created is bound or queued whether or not
	// the caller waited: the run must have bound members to test anything.
	if len(ls) == 0 || bound == 0 {
		t.Fatalf("%d leases created, %d members bound: the hang-ups came too early to test anything", len(ls), bound)
	}
	// A lease whose member names it gets its kubeconfig from GET; the
	// callers who hung up are not left without a way to use what they hold.
	if len(holder) != bound {
		t.Errorf("%d members are bound but %d have a kubeconfig from GET", bound, len(holder))
	}
}

// TestForgedStatusGetsNoKubeconfig: a lease whose status is made
// to point at a Ready member by a direct status write gets no kubeconfig
// from GET, cannot be extended, and the member is not handed to the next
// request (the binder skips a member some lease's status names).
func TestForgedStatusGetsNoKubeconfig(t *testing.T) {
	makePool(t, "forgery", 0)
	s := newService()
	p := caller("forger", kobev1.AccessRule{Pools: []string{"forgery"}})
	l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: "forgery"})
	if err != nil || l.Bound() {
		t.Fatalf("Create in an empty pool: %v, %+v", err, l)
	}
	victim := addMember(t, "forgery", "forgery-victim")

	obj := leaseObject(t, l.Object.Name)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	exp := metav1.NewTime(now.Add(time.Hour))
	obj.Status = kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: victim.Name, UID: victim.UID}, BoundAt: &now, ExpiresAt: &exp}
	if err := fx.env.Client.Status().Update(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(t.Context(), p, l.Object.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kubeconfig) != 0 || got.Bound() || got.Object.Status.InstanceRef != nil {
		t.Fatalf("GET of a forged lease: phase %s, instance %+v, kubeconfig %d bytes; want Pending, none, none", got.Object.Status.Phase, got.Object.Status.InstanceRef, len(got.Kubeconfig))
	}
	if _, err := s.Extend(t.Context(), p, l.Object.Name, time.Minute); !errors.Is(err, lease.ErrNotBound) {
		t.Fatalf("extending a forged lease: %v, want ErrNotBound", err)
	}
	// The next request must not get the member the forged status names.
	testenv.Eventually(t, 10*time.Second, "the cache to index the forged status", func() error {
		var named kobev1.ClusterLeaseList
		if err := fx.mgr.GetClient().List(t.Context(), &named, client.InNamespace(ns), client.MatchingFields{index.LeaseInstanceUID: string(victim.UID)}); err != nil {
			return err
		}
		if len(named.Items) != 1 {
			return fmt.Errorf("%d leases indexed", len(named.Items))
		}
		return nil
	})
	next, err := s.Create(t.Context(), caller("next", kobev1.AccessRule{Pools: []string{"forgery"}}), leaseservice.CreateRequest{Pool: "forgery"})
	if err != nil {
		t.Fatal(err)
	}
	if next.Bound() || len(next.Kubeconfig) != 0 {
		t.Fatalf("the next request was handed the member a forged status names: %+v", next.Object.Status)
	}
	fresh := &kobev1.ClusterInstance{}
	if err := fx.mgr.GetAPIReader().Get(t.Context(), clientKey(victim.Name), fresh); err != nil || fresh.Spec.LeaseRef != nil {
		t.Fatalf("the member a forged status names was claimed: %v, %+v", err, fresh.Spec.LeaseRef)
	}
}

// TestAccessMaterialMustBelongToMember: access material that is not the
// member's own mints nothing: another member's sealed material copied into
// its status (it is bound to that member's UID), or, for a member an older
// operator built, an access Secret of its name owned by another object.
func TestAccessMaterialMustBelongToMember(t *testing.T) {
	for _, tc := range []struct {
		name, pool, want string
		forge            func(t *testing.T, m *kobev1.ClusterInstance)
	}{
		{"another member's sealed material", "impostor-sealed", "does not open for this member", func(t *testing.T, m *kobev1.ClusterInstance) {
			other := m.DeepCopy()
			other.Name, other.UID = "impostor-other", "6c1e2a6e-0000-4000-8000-000000000001"
			accesstest.Publish(t, other, fx.access)
			m.Status.Access = other.Status.Access
		}},
		{"a legacy access Secret owned by someone else", "impostor-legacy", "does not belong to member", func(t *testing.T, m *kobev1.ClusterInstance) {
			fake := memberaccess.LegacySecret(m, fx.access)
			fake.OwnerReferences[0].UID = "someone-else"
			if err := fx.env.Client.Create(t.Context(), fake); err != nil {
				t.Fatal(err)
			}
			m.Status.Access, m.Status.AccessSecretRef = nil, &kobev1.LocalRef{Name: fake.Name}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := tc.pool
			makePool(t, pool, 0)
			m := addMember(t, pool, pool+"-m")
			tc.forge(t, m)
			if err := fx.env.Client.Status().Update(t.Context(), m); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "the cache to see the forged material", func() error {
				got := &kobev1.ClusterInstance{}
				if err := fx.mgr.GetClient().Get(t.Context(), clientKey(m.Name), got); err != nil {
					return err
				}
				if got.ResourceVersion != m.ResourceVersion {
					return fmt.Errorf("resourceVersion %s, want %s", got.ResourceVersion, m.ResourceVersion)
				}
				return nil
			})
			s := newService()
			p := caller("impostor", kobev1.AccessRule{Pools: []string{pool}})
			l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: pool})
			if err == nil || (l != nil && len(l.Kubeconfig) != 0) {
				t.Fatalf("Create with access material not the member's: %v; want an error, no kubeconfig", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say why (%q)", err, tc.want)
			}
			for _, l := range leasesOfPool(t, pool) {
				if lease.IsActive(&l) {
					t.Errorf("lease %s is left active (%s) after a failed mint", l.Name, l.Status.Phase)
				}
			}
		})
	}
}

// addMember creates one Ready member of pool with its sealed access material.
func addMember(t *testing.T, pool, name string) *kobev1.ClusterInstance {
	t.Helper()
	c := fx.env.Client
	inst := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{kobev1.LabelPool: pool}},
		Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: pool}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
	}
	if err := c.Create(t.Context(), inst); err != nil {
		t.Fatal(err)
	}
	accesstest.Publish(t, inst, fx.access)
	inst.Status.Phase = kobev1.InstanceReady
	if err := c.Status().Update(t.Context(), inst); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the cache to see "+name+" Ready", func() error {
		got := &kobev1.ClusterInstance{}
		if err := fx.mgr.GetClient().Get(t.Context(), clientKey(name), got); err != nil {
			return err
		}
		if !lease.Bindable(got) {
			return fmt.Errorf("phase %s", got.Status.Phase)
		}
		return nil
	})
	return inst
}

// TestInterruptedBind: a bind cut between its writes, by a
// caller who hangs up or by a member write whose answer is lost, never ends
// with a kubeconfig for a member that does not name the lease; the member
// is either bound to the lease (and its kubeconfig served by GET) or
// untouched.
func TestInterruptedBind(t *testing.T) {
	timeout := apierrors.NewTimeoutError("the request was cut", 1)
	cases := []struct {
		name string
		// claim wraps the member's Update: cancel hangs the caller up.
		claim func(ctx context.Context, c client.WithWatch, o client.Object, cancel context.CancelFunc) error
		// wantBound: the member ends naming the lease.
		wantBound bool
		// uncertain: the claim's outcome was unknown to the service, which
		// must then leave the lease unmarked (not Pending) for the lease
		// controller to look for the member before binding it again.
		uncertain bool
	}{
		{"caller hangs up between create and claim", func(ctx context.Context, c client.WithWatch, o client.Object, cancel context.CancelFunc) error {
			cancel()
			return c.Update(ctx, o)
		}, true, false},
		{"claim applied, its answer lost", func(ctx context.Context, c client.WithWatch, o client.Object, cancel context.CancelFunc) error {
			cancel()
			if err := c.Update(ctx, o); err != nil {
				return err
			}
			return timeout
		}, true, true},
		{"claim never applied, outcome unknown", func(ctx context.Context, c client.WithWatch, o client.Object, cancel context.CancelFunc) error {
			cancel()
			return timeout
		}, false, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			poolName := fmt.Sprintf("cut-%d", i)
			makePool(t, poolName, 2)
			reqCtx, cancel := context.WithCancel(t.Context())
			defer cancel()
			direct, err := client.NewWithWatch(fx.env.Config, client.Options{Scheme: fx.env.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			cut := interceptor.NewClient(direct, interceptor.Funcs{
				Update: func(ctx context.Context, wc client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
					if inst, ok := o.(*kobev1.ClusterInstance); ok && inst.Labels[kobev1.LabelPool] == poolName {
						return c.claim(ctx, wc, o, cancel)
					}
					return wc.Update(ctx, o, opts...)
				},
			})
			s := newService(func(o *leaseservice.Options) {
				o.Binder = &binding.Binder{Client: cut, Reader: fx.mgr.GetClient(), Clock: o.Clock}
			})
			p := caller(fmt.Sprintf("cut-%d", i), kobev1.AccessRule{Pools: []string{poolName}})
			answer, err := s.Create(reqCtx, p, leaseservice.CreateRequest{Pool: poolName})
			if err != nil {
				// The caller hung up: nobody reads this answer.
				t.Logf("Create after the hang-up: %v", err)
			}
			ls := leasesOfPool(t, poolName)
			if len(ls) != 1 {
				t.Fatalf("%d leases, want 1", len(ls))
			}
			l := ls[0]
			var insts kobev1.ClusterInstanceList
			if err := fx.mgr.GetAPIReader().List(t.Context(), &insts, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: poolName}); err != nil {
				t.Fatal(err)
			}
			var naming []string
			for _, m := range insts.Items {
				if m.Spec.LeaseRef != nil {
					if m.Spec.LeaseRef.UID != l.UID {
						t.Errorf("member %s names %s, not the lease", m.Name, m.Spec.LeaseRef.Name)
					}
					naming = append(naming, m.Name)
				}
			}
			switch {
			case c.wantBound && len(naming) != 1:
				t.Fatalf("members naming the lease: %v, want one", naming)
			case !c.wantBound && len(naming) != 0:
				t.Fatalf("members naming the lease: %v, want none (untouched)", naming)
			}
			check := func(via string, kc []byte) {
				if len(kc) == 0 {
					return
				}
				m, _ := kubeconfigMember(t, kc)
				if !slices.Contains(naming, m) {
					t.Errorf("%s minted a kubeconfig for %s, which does not name the lease (members naming it: %v)", via, m, naming)
				}
			}
			if answer != nil {
				check("POST", answer.Kubeconfig)
			}
			got, err := s.Get(t.Context(), p, l.Name)
			if err != nil {
				t.Fatal(err)
			}
			check("GET", got.Kubeconfig)
			if c.wantBound != (len(got.Kubeconfig) > 0) {
				t.Errorf("GET: kubeconfig %d bytes, phase %s; want a kubeconfig exactly when the member names the lease", len(got.Kubeconfig), got.Object.Status.Phase)
			}
			if c.wantBound && (!got.Bound() || got.Object.Status.ExpiresAt == nil) {
				t.Errorf("GET of a lease its member names: %+v, want Bound with an expiry", got.Object.Status)
			}
			if c.uncertain && l.Status.Phase == kobev1.LeasePending {
				t.Errorf("a lease whose claim may have landed was marked Pending (the controller would bind it at once)")
			}
		})
	}
}

// BenchmarkHandOut times one hand-out through the service (create, claim,
// mint; the status copy after the answer), against the real API server.
func BenchmarkHandOut(b *testing.B) {
	const perPool = 40
	s := newService()
	var lat []time.Duration
	for n := 0; n < b.N; {
		b.StopTimer()
		poolName := fmt.Sprintf("bench-%d-%d", b.N, n)
		makePoolB(b, poolName, min(perPool, b.N-n))
		p := caller("bench", kobev1.AccessRule{Pools: []string{poolName}})
		b.StartTimer()
		for i := 0; i < perPool && n < b.N; i, n = i+1, n+1 {
			start := time.Now()
			l, err := s.Create(context.Background(), p, leaseservice.CreateRequest{Pool: poolName})
			if err != nil || !l.Bound() {
				b.Fatalf("hand-out %d: %v", n, err)
			}
			lat = append(lat, time.Since(start))
			// Let the work that follows an answer finish, so that each
			// hand-out is timed alone rather than behind the previous one's.
			b.StopTimer()
			time.Sleep(20 * time.Millisecond)
			b.StartTimer()
		}
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// makePoolB is makePool for a benchmark.
func makePoolB(b *testing.B, name string, members int) {
	ctx, c := context.Background(), fx.env.Client
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](0), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if err := c.Create(ctx, p); err != nil {
		b.Fatal(err)
	}
	for i := range members {
		inst := &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", name, i), Namespace: ns, Labels: map[string]string{kobev1.LabelPool: name}},
			Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: name}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
		}
		if err := c.Create(ctx, inst); err != nil {
			b.Fatal(err)
		}
		accesstest.Publish(b, inst, fx.access)
		inst.Status.Phase = kobev1.InstanceReady
		if err := c.Status().Update(ctx, inst); err != nil {
			b.Fatal(err)
		}
	}
	if err := testenv.Poll(ctx, 15*time.Second, func() error {
		var insts kobev1.ClusterInstanceList
		if err := fx.mgr.GetClient().List(ctx, &insts, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: name}); err != nil {
			return err
		}
		ready := 0
		for i := range insts.Items {
			if lease.Bindable(&insts.Items[i]) {
				ready++
			}
		}
		if ready != members {
			return fmt.Errorf("%d of %d Ready in the cache", ready, members)
		}
		return fx.mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(p), &kobev1.ClusterPool{})
	}); err != nil {
		b.Fatal(err)
	}
}
