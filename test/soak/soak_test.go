//go:build soak

package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// The soak's pool and callers.
const (
	poolName = "soak"
	poolSize = 8
	// owners are token AccessPolicies sharing the clients, so that no owner
	// queues more leases than --max-queued-per-owner allows by default.
	owners = 4
	// settleWithin bounds the wait, once the clients stopped, for every
	// lease to end (orphans of cut POSTs expire at longTTL) and the pool
	// to settle; leaks are what is left after it.
	settleWithin = longTTL + 2*time.Minute
)

// TestSoak: two replicas, a sim pool, clients leasing and releasing through
// the HTTP API for -soak.duration while a fault is injected every
// -soak.fault-every; fails on any violation the checker finds.
func TestSoak(t *testing.T) {
	began := time.Now()
	load0 := loadavg()
	ns := suite.env.NewNamespace(t)
	tokens := createPolicies(t, ns)
	dir := t.TempDir()
	if *logDir != "" {
		dir = *logDir
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	reps := &replicas{ns: ns, dir: dir}
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startReplicas(t, ctx, reps)
	defer reps.stop()
	if err := watchAPI(ctx, ns, rec); err != nil {
		t.Fatal(err)
	}
	if err := sampleLeader(ctx, ns, rec); err != nil {
		t.Fatal(err)
	}
	go tickChecker(ctx, ns, rec)
	createPool(t, ns)
	waitWarm(t, ns)

	t.Logf("soak: %d clients for %s, a fault every %s; replicas' logs in %s", *clients, *duration, *faultEvery, dir)
	runLoad(ctx, ns, tokens, reps, rec)
	settle(t, ns, rec)
	rec.do(func(c *Checker) { c.Final(time.Now()) })
	cancel()

	res := summarise(rec, reps, began, load0)
	fmt.Println(res.text())
	if *writeDocs {
		if err := res.writeDocs(docsPath()); err != nil {
			t.Errorf("writing docs/benchmarks.md: %v", err)
		}
	}
	if len(res.Violations) > 0 {
		t.Errorf("%d violations (listed above)\n%s", len(res.Violations), reps.tails(3000))
	}
}

// createPolicies makes the owners' token policies and returns their tokens.
func createPolicies(t *testing.T, ns string) []string {
	t.Helper()
	var tokens []string
	for i := range owners {
		name := fmt.Sprintf("soak-%d", i)
		token := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-token", Namespace: ns}, StringData: map[string]string{"token": token}}
		pol := &kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: secret.Name}}},
				Identity: name,
				Rules:    []kobev1.AccessRule{{Pools: []string{"*"}}},
			},
		}
		for _, obj := range []client.Object{secret, pol} {
			if err := suite.env.Client.Create(t.Context(), obj); err != nil {
				t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
			}
		}
		tokens = append(tokens, token)
	}
	return tokens
}

// startReplicas starts r0 and r1, waits until both serve and one leads,
// and keeps them running (restarted on exit) until ctx ends.
func startReplicas(t *testing.T, ctx context.Context, reps *replicas) {
	t.Helper()
	for i := range 2 {
		if err := reps.start(i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := reps.waitServing(ctx, i, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		go reps.supervise(ctx, i)
	}
	if _, err := reps.leader(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

func createPool(t *testing.T, ns string) {
	t.Helper()
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To(int32(poolSize)),
			TTL:  &metav1.Duration{Duration: 30 * time.Minute},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendSim,
				Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: 500 * time.Millisecond}}},
		},
	}
	if err := suite.env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pool: %v", err)
	}
}

// waitWarm waits until the pool has all its members Ready and unclaimed.
func waitWarm(t *testing.T, ns string) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "the pool to be warm", func() error {
		members, _, err := snapshot(t.Context(), ns)
		if err != nil {
			return err
		}
		warm := 0
		for _, m := range members {
			if m.Status.Phase == kobev1.InstanceReady && m.Spec.LeaseRef == nil && m.DeletionTimestamp == nil {
				warm++
			}
		}
		if warm < poolSize {
			return fmt.Errorf("%d of %d warm", warm, poolSize)
		}
		return nil
	})
}

// runLoad runs the clients and the faults for -soak.duration, then stops
// both, letting each finish what it is doing.
func runLoad(ctx context.Context, ns string, tokens []string, reps *replicas, rec *recorder) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range *clients {
		c := &soakClient{
			id: i, token: tokens[i%len(tokens)], pool: poolName, ns: ns, reps: reps, rec: rec,
			http: &http.Client{}, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))),
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.run(stop) }()
	}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); injectFaults(ctx, stop, *faultEvery, reps, rec) }()
	time.Sleep(*duration)
	close(stop)
	<-faultsDone
	wg.Wait()
}

// settle waits until no lease is Pending or Bound, then until the pool has
// no leak, each within settleWithin; what is left is a violation.
func settle(t *testing.T, ns string, rec *recorder) {
	t.Helper()
	ctx := t.Context()
	err := testenv.Poll(ctx, settleWithin, func() error {
		_, leases, err := snapshot(ctx, ns)
		if err != nil {
			return err
		}
		for _, l := range leases {
			if !ended(string(l.Status.Phase)) {
				return fmt.Errorf("lease %s is %q", l.Name, l.Status.Phase)
			}
		}
		return nil
	})
	if err != nil {
		t.Logf("soak: leases did not all end within %s: %v", settleWithin, err)
	}
	var leaks []Violation
	err = testenv.Poll(ctx, 2*time.Minute, func() error {
		members, leases, err := snapshot(ctx, ns)
		if err != nil {
			return err
		}
		leaks = Leaks(time.Now(), toSnapshot(members, leases))
		if len(leaks) > 0 {
			return fmt.Errorf("%d leaks", len(leaks))
		}
		return nil
	})
	if err != nil {
		rec.do(func(c *Checker) { c.Add(leaks...) })
	}
}

func snapshot(ctx context.Context, ns string) ([]kobev1.ClusterInstance, []kobev1.ClusterLease, error) {
	var ml kobev1.ClusterInstanceList
	if err := suite.env.Client.List(ctx, &ml, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	var ll kobev1.ClusterLeaseList
	if err := suite.env.Client.List(ctx, &ll, client.InNamespace(ns)); err != nil {
		return nil, nil, err
	}
	return ml.Items, ll.Items, nil
}

func toSnapshot(members []kobev1.ClusterInstance, leases []kobev1.ClusterLease) Snapshot {
	s := Snapshot{Pool: poolName, PoolSize: poolSize}
	for i := range members {
		s.Members = append(s.Members, toMember(&members[i]))
	}
	for i := range leases {
		s.Leases = append(s.Leases, toLease(&leases[i]))
	}
	return s
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	var a, b2, c string
	_, _ = fmt.Sscan(string(b), &a, &b2, &c)
	return a + " " + b2 + " " + c
}
