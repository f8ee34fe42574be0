//go:build heavy

// Package scaling tests end to end how pools size themselves, follow their
// template and report failures: the real kobe-operator binary with the sim
// backend (and the local backend for a template rollout), leases through the
// real HTTP API, and pools, members and events read from the API server.
// Each scenario owns its pool and runs in parallel with the others.
package scaling

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/kobesuite"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	namespace = kobesuite.Namespace
	// memberDeadline bounds waits that include building a local member
	// (a real control plane: slower when several start on 2 cores).
	memberDeadline = 4 * time.Minute
)

// s is the suite's operator: sim and local backends in namespace default.
var s *kobesuite.Suite

func TestMain(m *testing.M) {
	code, err := runSuite(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scaling:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func runSuite(m *testing.M) (int, error) {
	// The watch clients log through controller-runtime, which otherwise
	// complains that no logger is set.
	ctrllog.SetLogger(logr.Discard())
	work, err := os.MkdirTemp("", "kobe-scaling-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	ks, err := kobesuite.New(work)
	if err != nil {
		return 1, err
	}
	s = ks
	code, err := run(m)
	if code != 0 {
		fmt.Fprintf(os.Stderr, "operator log tail:\n%s\n", s.Tail())
	}
	return code, errors.Join(err, s.Teardown())
}

func run(m *testing.M) (int, error) {
	if err := s.CreatePolicy(context.Background(), "scaling-ci", kobev1.AccessRule{Pools: []string{"*"}}); err != nil {
		return 1, err
	}
	// The burst queues more leases of one caller than the default cap
	// allows while other scenarios hold theirs.
	if err := s.StartOperator("--enable-sim-backend", "--disable-kubernetes-backend", "--max-queued-per-owner", "50", "--default-max-concurrent-leases", "0"); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// simPool is a sim pool named name in namespace ns.
func simPool(ns, name string, sim kobev1.SimBackendSpec) *kobev1.ClusterPool {
	return &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{
			TTL:     &metav1.Duration{Duration: 30 * time.Minute},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: &sim},
		},
	}
}

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// createPool creates p and, at the end of the test, deletes its leases and
// the pool and waits for its members to go (while the operator runs: the
// members carry finalizers).
func createPool(t *testing.T, p *kobev1.ClusterPool) {
	t.Helper()
	c := s.Env.Client
	if err := c.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pool %s: %v", p.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			logEvents(ctx, t, p.Namespace, p.Name)
		}
		_ = c.DeleteAllOf(ctx, &kobev1.ClusterLease{}, client.InNamespace(p.Namespace), client.MatchingLabels{kobev1.LabelPool: p.Name})
		_ = c.Delete(ctx, &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		if err := testenv.Poll(ctx, 2*time.Minute, func() error {
			l, err := listMembers(ctx, p.Namespace, p.Name)
			if err != nil {
				return err
			}
			if len(l) > 0 {
				return fmt.Errorf("%d members left", len(l))
			}
			return nil
		}); err != nil {
			t.Errorf("deleting pool %s: %v", p.Name, err)
		}
	})
}

func getPool(ctx context.Context, ns, name string) (*kobev1.ClusterPool, error) {
	p := &kobev1.ClusterPool{}
	if err := s.Env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
		return nil, fmt.Errorf("reading pool %s: %w", name, err)
	}
	return p, nil
}

func mustPool(t *testing.T, ns, name string) *kobev1.ClusterPool {
	t.Helper()
	p, err := getPool(t.Context(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitPool waits until cond holds for the pool and returns the pool it held
// for.
func waitPool(t *testing.T, ns, name string, within time.Duration, what string, cond func(*kobev1.ClusterPool) error) *kobev1.ClusterPool {
	t.Helper()
	var got *kobev1.ClusterPool
	testenv.Eventually(t, within, fmt.Sprintf("pool %s: %s", name, what), func() error {
		p, err := getPool(t.Context(), ns, name)
		if err != nil {
			return err
		}
		if err := cond(p); err != nil {
			return fmt.Errorf("%w; status %s", err, brief(p))
		}
		got = p
		return nil
	})
	return got
}

// brief is the part of a pool's status a failed wait should show.
func brief(p *kobev1.ClusterPool) string {
	st := p.Status
	var conds []string
	for _, c := range st.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	b, _ := json.Marshal(st.Demand)
	return fmt.Sprintf("phase %s ready %d leased %d creating %d recycling %d queue %d failures %d creatingTimeouts %d outdated %d rev %d lastPressure %v demand %s conditions %v",
		st.Phase, st.Ready, st.Leased, st.Creating, st.Recycling, st.QueueDepth, st.Failures, st.CreatingTimeouts, st.Outdated, st.TemplateRevision, st.LastPressure, b, conds)
}

// hasCondition says whether the pool's condition t has status and reason,
// for the pool's current generation.
func hasCondition(p *kobev1.ClusterPool, typ string, status metav1.ConditionStatus, reason string) error {
	c := meta.FindStatusCondition(p.Status.Conditions, typ)
	if c == nil {
		return fmt.Errorf("no %s condition", typ)
	}
	if c.Status != status || c.Reason != reason || c.ObservedGeneration != p.Generation {
		return fmt.Errorf("%s condition %s/%s (generation %d of %d): %q, want %s/%s", typ, c.Status, c.Reason, c.ObservedGeneration, p.Generation, c.Message, status, reason)
	}
	return nil
}

// findCondition is the pool's condition typ, or nil.
func findCondition(p *kobev1.ClusterPool, typ string) *metav1.Condition {
	return meta.FindStatusCondition(p.Status.Conditions, typ)
}

// listMembers lists the pool's members.
func listMembers(ctx context.Context, ns, pool string) ([]kobev1.ClusterInstance, error) {
	var l kobev1.ClusterInstanceList
	if err := s.Env.Client.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: pool}); err != nil {
		return nil, fmt.Errorf("listing members of %s: %w", pool, err)
	}
	return l.Items, nil
}

// poolEvents lists the Events about the pool with reason.
func poolEvents(ctx context.Context, ns, pool, reason string) ([]corev1.Event, error) {
	var l corev1.EventList
	if err := s.Env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	var out []corev1.Event
	for _, e := range l.Items {
		if e.InvolvedObject.Kind == "ClusterPool" && e.InvolvedObject.Name == pool && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out, nil
}

// logEvents logs the Events about the pool and its members, oldest first,
// to show what the operator did when a check failed.
func logEvents(ctx context.Context, t *testing.T, ns, pool string) {
	var l corev1.EventList
	if err := s.Env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
		t.Logf("listing events: %v", err)
		return
	}
	slices.SortFunc(l.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	for _, e := range l.Items {
		o := e.InvolvedObject
		if o.Name == pool || strings.HasPrefix(o.Name, "pool-"+pool+"-") || (e.Related != nil && strings.HasPrefix(e.Related.Name, "pool-"+pool+"-")) {
			t.Logf("event %s %s %s/%s: %s", eventTime(e).UTC().Format(time.StampMilli), e.Type, o.Kind, o.Name, e.Reason+": "+e.Message)
		}
	}
}

// eventTime is when an Event happened, in either API's field.
func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// seen is one watch event, with the time the test received it.
type seen[T client.Object] struct {
	at  time.Time
	typ watch.EventType
	obj T
}

// recorder keeps every event of a watch that started before the objects it
// is about, so that a check over it sees every state the API server
// stored (a watch delivers each change).
type recorder[T client.Object] struct {
	mu     sync.Mutex
	events []seen[T]
	// ended is set when the watch ended before the test stopped it.
	ended error
}

// record watches list's kind in ns with opts until the test ends.
func record[T client.Object](t *testing.T, ns string, list client.ObjectList, opts ...client.ListOption) *recorder[T] {
	t.Helper()
	wc, err := client.NewWithWatch(s.Env.Config, client.Options{Scheme: s.Env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(t.Context(), list, append([]client.ListOption{client.InNamespace(ns)}, opts...)...)
	if err != nil {
		t.Fatalf("watching %T: %v", list, err)
	}
	r := &recorder[T]{}
	stopped := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			r.mu.Lock()
			if o, ok := e.Object.(T); ok && e.Type != watch.Error {
				r.events = append(r.events, seen[T]{at: time.Now(), typ: e.Type, obj: o})
			} else {
				r.ended = fmt.Errorf("watch error event: %v", e.Object)
			}
			r.mu.Unlock()
		}
		select {
		case <-stopped:
		default:
			r.mu.Lock()
			if r.ended == nil {
				r.ended = errors.New("the watch ended before the test did")
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stopped)
		w.Stop()
		<-done
	})
	return r
}

// snapshot returns the events so far; it fails the test when the watch
// ended early, since a check over an incomplete record proves nothing.
func (r *recorder[T]) snapshot(t *testing.T) []seen[T] {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended != nil {
		t.Fatalf("watch: %v", r.ended)
	}
	return append([]seen[T](nil), r.events...)
}

// watchMembers records the pool's members.
func watchMembers(t *testing.T, ns, pool string) *recorder[*kobev1.ClusterInstance] {
	return record[*kobev1.ClusterInstance](t, ns, &kobev1.ClusterInstanceList{}, client.MatchingLabels{kobev1.LabelPool: pool})
}

// watchPool records the pool itself.
func watchPool(t *testing.T, ns, pool string) *recorder[*kobev1.ClusterPool] {
	return record[*kobev1.ClusterPool](t, ns, &kobev1.ClusterPoolList{}, client.MatchingFields{"metadata.name": pool})
}

// maxAlive is the most members that existed at once (any phase, being
// deleted included), from a watch that saw them all created.
func maxAlive(events []seen[*kobev1.ClusterInstance]) int {
	alive := map[string]bool{}
	most := 0
	for _, e := range events {
		switch e.typ {
		case watch.Added, watch.Modified:
			alive[e.obj.Name] = true
		case watch.Deleted:
			delete(alive, e.obj.Name)
		}
		most = max(most, len(alive))
	}
	return most
}

// created lists the members in the order the watch saw them appear, with
// the time each appeared.
func created(events []seen[*kobev1.ClusterInstance]) (names []string, at []time.Time) {
	known := map[string]bool{}
	for _, e := range events {
		if e.typ == watch.Added && !known[e.obj.Name] {
			known[e.obj.Name] = true
			names = append(names, e.obj.Name)
			at = append(at, e.at)
		}
	}
	return names, at
}

// api calls one operator's lease API with a token.
type api struct {
	url, token string
	http       *http.Client
}

// suiteAPI is the suite operator's API with the suite's token.
func suiteAPI() *api { return &api{url: s.APIURL, token: s.Token, http: s.HTTPClient()} }

func (a *api) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, a.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer to %s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// lease asks for a lease of pool: Bound (201) or queued (202).
func (a *api) lease(t *testing.T, pool string) wire.Lease {
	t.Helper()
	code, b := a.do(t, http.MethodPost, "/v1/leases", fmt.Sprintf(`{"pool":%q,"ttl":"10m"}`, pool))
	if code != http.StatusCreated && code != http.StatusAccepted {
		t.Fatalf("POST /v1/leases for pool %s: %d %s", pool, code, b)
	}
	var l wire.Lease
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("decoding lease %s: %v", b, err)
	}
	if (code == http.StatusCreated) != (l.Phase == wire.PhaseBound) {
		t.Fatalf("POST /v1/leases answered %d with a lease in phase %s", code, l.Phase)
	}
	return l
}

// release ends a lease, Bound or queued.
func (a *api) release(t *testing.T, id string) {
	t.Helper()
	if code, b := a.do(t, http.MethodDelete, "/v1/leases/"+id, ""); code/100 != 2 {
		t.Fatalf("DELETE /v1/leases/%s: %d %s", id, code, b)
	}
}

// since is how long ago start was, for logs.
func since(start time.Time) string { return time.Since(start).Round(100 * time.Millisecond).String() }
