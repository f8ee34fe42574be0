//go:build integration

package clusterinstance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// fakeBackend stands in for a provisioner: a member "is" the test API
// server itself, so the readiness gates run for real against it. What each
// member does is set by name before it is created.
type fakeBackend struct {
	kubeconfig []byte
	endpoint   string

	mu      sync.Mutex
	plans   map[string]*memberPlan
	creates map[string]int
	deletes map[string]int
	state   map[string]backend.State
	swept   []sweptMember
	// calls lists, per member, "fence" and "delete" in the order made.
	calls map[string][]string
	// fencedAt is when each member was first fenced.
	fencedAt map[string]time.Time
}

type memberPlan struct {
	createErr   error
	after       backend.State // state after Create; Ready when empty
	slowDeletes int           // Delete reports "not gone yet" this many times
	fenceFails  int           // Fence fails this many times
	message     string        // what Observe says when not Ready; "fake says <state>" when empty
}

func newFake(kubeconfig []byte, endpoint string) *fakeBackend {
	return &fakeBackend{kubeconfig: kubeconfig, endpoint: endpoint, plans: map[string]*memberPlan{},
		creates: map[string]int{}, deletes: map[string]int{}, state: map[string]backend.State{},
		calls: map[string][]string{}, fencedAt: map[string]time.Time{}}
}

func (f *fakeBackend) Type() kobev1.BackendType { return kobev1.BackendLocal }

func (f *fakeBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{MaxServers: 1}
}

func (f *fakeBackend) plan(name string) *memberPlan {
	if p, ok := f.plans[name]; ok {
		return p
	}
	return &memberPlan{}
}

func (f *fakeBackend) set(name string, p memberPlan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plans[name] = &p
}

func (f *fakeBackend) setState(name string, s backend.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[name] = s
}

func (f *fakeBackend) count(m map[string]int, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[name]
}

func key(m backend.Member) string { return m.Namespace + "/" + m.Name }

func (f *fakeBackend) Create(_ context.Context, m backend.Member) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates[key(m)]++
	p := f.plan(key(m))
	if p.createErr != nil {
		return p.createErr
	}
	if _, ok := f.state[key(m)]; !ok {
		f.state[key(m)] = backend.StateReady
		if p.after != "" {
			f.state[key(m)] = p.after
		}
	}
	return nil
}

func (f *fakeBackend) Observe(_ context.Context, m backend.Member) (backend.Observation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.state[key(m)]
	switch {
	case !ok:
		return backend.Observation{State: backend.StateAbsent}, nil
	case s == backend.StateReady:
		return backend.Observation{State: s, Access: &backend.Access{Endpoint: f.endpoint, CACert: []byte("ca"),
			ClientCACert: []byte("client-ca"), ClientCAKey: []byte("client-ca-key"), AdminKubeconfig: f.kubeconfig}}, nil
	}
	if p := f.plan(key(m)); p.message != "" {
		return backend.Observation{State: s, Message: p.message}, nil
	}
	return backend.Observation{State: s, Message: "fake says " + string(s)}, nil
}

func (f *fakeBackend) Delete(_ context.Context, m backend.Member) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes[key(m)]++
	f.calls[key(m)] = append(f.calls[key(m)], "delete")
	if p := f.plan(key(m)); f.deletes[key(m)] <= p.slowDeletes {
		return false, nil
	}
	delete(f.state, key(m))
	return true, nil
}

// sweptMember is a member the fake backend's Sweep finds.
type sweptMember struct {
	namespace string
	uid       types.UID
}

// Sweep asks owned about each of f.swept and leaves there the UIDs it
// would destroy.
func (f *fakeBackend) Sweep(_ context.Context, owned backend.OwnedFunc) ([]string, error) {
	var removed []string
	f.mu.Lock()
	found := append([]sweptMember(nil), f.swept...)
	f.mu.Unlock()
	for _, m := range found {
		if !owned(m.namespace, m.uid) {
			removed = append(removed, string(m.uid))
		}
	}
	f.mu.Lock()
	f.swept = f.swept[:0]
	for _, uid := range removed {
		f.swept = append(f.swept, sweptMember{uid: types.UID(uid)})
	}
	f.mu.Unlock()
	return removed, nil
}

type harness struct {
	env  *testenv.Env
	c    client.Client
	fake *fakeBackend
	// namespaces are those the harness's manager watches, one per subtest.
	namespaces *testenv.Namespaces
}

// harnessNamespaces is how many namespaces a harness makes for its subtests:
// its manager must know them before it starts.
const harnessNamespaces = 12

func startHarness(t *testing.T) *harness {
	return startHarnessWith(t, func(f *fakeBackend) backend.Backend { return f })
}

// startHarnessWith wires the backend wrap makes of the fake (host_test.go
// gives it a host).
func startHarnessWith(t *testing.T, wrap func(*fakeBackend) backend.Backend) *harness {
	env := testenv.Shared(t)
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The "member" is the test API server: its default ServiceAccount is
	// what InClusterToken needs (there is no controller manager here). The
	// first harness of the test binary creates it.
	err = env.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	fake := newFake(kubeconfig, env.Config.Host)
	namespaces := env.NewNamespaces(t, harnessNamespaces)
	mgr := env.NewManager(t, namespaces.All()...)
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName), Access: accesstest.Sealer(),
		Clock: clock.RealClock{}, Backends: backend.Registry{kobev1.BackendLocal: wrap(fake)}, PollInterval: 200 * time.Millisecond}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	setupPoolCounter(t, mgr)
	testenv.StartManager(t, mgr)
	return &harness{env: env, c: env.Client, fake: fake, namespaces: namespaces}
}

// namespace hands one subtest a namespace of its own that the harness's
// manager watches.
func (h *harness) namespace(t *testing.T) string { return h.namespaces.Take(t) }

// poolAndMember creates a pool (no pool controller runs here; poolCounter
// counts its failures) and one member of it named like the pool controller
// would.
func (h *harness) poolAndMember(t *testing.T, ns string, mut func(*kobev1.ClusterPool)) (*kobev1.ClusterPool, *kobev1.ClusterInstance) {
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](0), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if mut != nil {
		mut(p)
	}
	if err := h.c.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p, h.member(t, p, 0)
}

func (h *harness) member(t *testing.T, p *kobev1.ClusterPool, n int32) *kobev1.ClusterInstance {
	m := pool.NewMember(p, n, pool.TemplateHash(&p.Spec))
	m.Finalizers = nil // the instance controller adds it
	if err := h.c.Create(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// holds turns a check and the state it saw into testenv.Eventually's error.
func holds(ok bool, state string) error {
	if ok {
		return nil
	}
	if state == "" {
		state = "not yet"
	}
	return errors.New(state)
}

func (h *harness) get(t *testing.T, m *kobev1.ClusterInstance) (*kobev1.ClusterInstance, bool) {
	got := &kobev1.ClusterInstance{}
	err := h.c.Get(t.Context(), client.ObjectKeyFromObject(m), got)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return got, true
}

func (h *harness) waitPhase(t *testing.T, m *kobev1.ClusterInstance, phase kobev1.InstancePhase, timeout time.Duration) *kobev1.ClusterInstance {
	t.Helper()
	var got *kobev1.ClusterInstance
	testenv.Eventually(t, timeout, fmt.Sprintf("%s %s", m.Name, phase), func() error {
		var ok bool
		got, ok = h.get(t, m)
		if !ok {
			return holds(false, "gone")
		}
		return holds(got.Status.Phase == phase, fmt.Sprintf("phase %q conditions %v", got.Status.Phase, got.Status.Conditions))
	})
	return got
}

func (h *harness) waitGone(t *testing.T, m *kobev1.ClusterInstance, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, m.Name+" gone", func() error {
		got, ok := h.get(t, m)
		if !ok {
			return holds(true, "")
		}
		return holds(false, fmt.Sprintf("phase %q deleting %v", got.Status.Phase, got.DeletionTimestamp != nil))
	})
}

// hasEvent reports whether an event with reason was recorded about obj.
func (h *harness) hasEvent(t *testing.T, ns, name, reason string) bool {
	var list eventsv1.EventList
	if err := h.c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			return true
		}
	}
	return false
}

// routineEvents lists the Events about name that are not Warnings: kobe
// records Events only for what a person acts on, so a member's routine
// life (built, Ready, leased, destroyed) leaves none.
func (h *harness) routineEvents(t *testing.T, ns, name string) []string {
	var list eventsv1.EventList
	if err := h.c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Type != corev1.EventTypeWarning {
			out = append(out, e.Type+" "+e.Reason+": "+e.Note)
		}
	}
	return out
}

func (h *harness) waitEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "event "+reason+" on "+name, func() error {
		return holds(h.hasEvent(t, ns, name, reason), "")
	})
}

func (h *harness) failures(t *testing.T, p *kobev1.ClusterPool) int32 {
	return h.pool(t, p).Status.Failures
}

func (h *harness) pool(t *testing.T, p *kobev1.ClusterPool) *kobev1.ClusterPool {
	got := &kobev1.ClusterPool{}
	if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestInstanceController(t *testing.T) {
	h := startHarness(t)

	t.Run("a member is built, gated, Ready with its access sealed in its status, and destroyed", func(t *testing.T) {
		ns := h.namespace(t)
		p, m := h.poolAndMember(t, ns, nil)
		got := h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		for _, c := range []string{kobev1.ConditionProvisioned, "APIServerReachable", "InClusterToken", kobev1.ConditionReady, kobev1.ConditionHealthy} {
			if !meta.IsStatusConditionTrue(got.Status.Conditions, c) {
				t.Errorf("condition %s not True: %v", c, got.Status.Conditions)
			}
		}
		if got.Status.Endpoint != h.env.Config.Host || got.Status.Access == nil || got.Status.LastPhaseChange == nil {
			t.Errorf("status = %+v", got.Status)
		}
		if ttr := got.Status.TimeToReady; ttr == nil || ttr.Duration < 0 || ttr.Duration > got.Status.LastPhaseChange.Sub(got.CreationTimestamp.Time)+time.Second {
			t.Errorf("timeToReady = %v, want the time from creation (%s) to Ready (%s)", ttr, got.CreationTimestamp, got.Status.LastPhaseChange)
		}
		if got := h.pool(t, p); got.ResourceVersion != p.ResourceVersion {
			t.Errorf("a member became Ready in a pool without failures and the pool was written (resourceVersion %s -> %s, status %+v)",
				p.ResourceVersion, got.ResourceVersion, got.Status)
		}
		if len(got.Finalizers) != 1 || got.Finalizers[0] != kobev1.FinalizerInstance {
			t.Errorf("finalizers = %v", got.Finalizers)
		}
		// The material is sealed in the member's status, in one write with
		// the move to Provisioned; no Secret per member.
		if a, err := accesstest.Sealer().Full(got); err != nil || string(a.AdminKubeconfig) == "" {
			t.Errorf("opening status.access: %v", err)
		}
		if strings.Contains(string(got.Status.Access.SealedClientCAKey), "PRIVATE KEY") {
			t.Error("status.access holds the client CA key in the clear")
		}
		var secrets corev1.SecretList
		if err := h.c.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, sec := range secrets.Items {
			if memberaccess.IsAccessSecret(&sec) {
				t.Errorf("an access Secret %s was written", sec.Name)
			}
		}
		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
		// Events are written asynchronously: give a wrong one time to land.
		testenv.Consistently(t, time.Second, "no routine Events about "+m.Name, func() error {
			if evs := h.routineEvents(t, ns, m.Name); len(evs) > 0 {
				return fmt.Errorf("a member's routine life recorded Events (each a write on the host's API server): %q", evs)
			}
			return nil
		})
		if n := h.fake.count(h.fake.deletes, ns+"/"+m.Name); n < 1 {
			t.Errorf("backend Delete called %d times", n)
		}
	})

	t.Run("the finalizer holds until the backend reports the member gone", func(t *testing.T) {
		ns := h.namespace(t)
		h.fake.set(ns+"/pool-p-0", memberPlan{slowDeletes: 3})
		_, m := h.poolAndMember(t, ns, nil)
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		got := h.waitPhase(t, m, kobev1.InstanceRecycling, 10*time.Second)
		if c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionReady); c == nil || c.Reason != kobev1.ReasonScaledDown {
			t.Errorf("Ready condition = %+v", c)
		}
		h.waitGone(t, m, 15*time.Second)
		if n := h.fake.count(h.fake.deletes, ns+"/"+m.Name); n < 4 {
			t.Errorf("backend Delete called %d times, want at least 4", n)
		}
	})

	t.Run("failing health probes recycle a Ready member within interval x threshold", func(t *testing.T) {
		ns := h.namespace(t)
		p, m := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) {
			p.Spec.HealthCheck = &kobev1.HealthCheckSpec{IntervalSeconds: 1, FailureThreshold: 2}
		})
		h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		start := time.Now()
		h.fake.setState(ns+"/"+m.Name, backend.StateFailed)
		h.waitGone(t, m, 10*time.Second)
		t.Logf("recycled %s after the member failed", time.Since(start).Round(100*time.Millisecond))
		if time.Since(start) > 1*2*time.Second+8*time.Second { // interval x threshold + margin for a loaded CI
			t.Errorf("recycled after %s", time.Since(start))
		}
		h.waitEvent(t, ns, m.Name, kobev1.ReasonProbeFailed)
		h.waitEvent(t, ns, m.Name, kobev1.ReasonUnhealthy)
		if f := h.failures(t, p); f != 0 {
			t.Errorf("pool failures = %d; an unhealthy Ready member is not a failure to become Ready", f)
		}
	})

	t.Run("a member the backend reports Failed is recycled and counted once", func(t *testing.T) {
		ns := h.namespace(t)
		h.fake.set(ns+"/pool-p-0", memberPlan{after: backend.StateFailed})
		p, m := h.poolAndMember(t, ns, nil)
		h.waitGone(t, m, 15*time.Second)
		h.waitEvent(t, ns, m.Name, kobev1.ReasonProvisionFailed)
		if f := h.failures(t, p); f != 1 {
			t.Errorf("pool failures = %d, want 1", f)
		}
	})

	t.Run("a member still Creating after creatingTimeout is recycled and counted", func(t *testing.T) {
		ns := h.namespace(t)
		h.fake.set(ns+"/pool-p-0", memberPlan{after: backend.StateProvisioning})
		p, m := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) { p.Spec.CreatingTimeout = &metav1.Duration{Duration: 3 * time.Second} })
		got := h.waitPhase(t, m, kobev1.InstanceCreating, 10*time.Second)
		start := got.CreationTimestamp.Time
		h.waitGone(t, m, 20*time.Second)
		if d := time.Since(start); d < 2*time.Second {
			t.Errorf("recycled after %s, before the timeout", d)
		}
		h.waitEvent(t, ns, m.Name, kobev1.ReasonCreatingTimeout)
		if f := h.failures(t, p); f != 1 {
			t.Errorf("pool failures = %d, want 1", f)
		}
	})

	t.Run("failures count in a row with the last one and the creatingTimeout reaps; a member becoming Ready ends the streak", func(t *testing.T) {
		ns := h.namespace(t)
		// Longer than lastFailure.message may be, cut inside a 2-byte rune.
		h.fake.set(ns+"/pool-p-0", memberPlan{after: backend.StateFailed, message: strings.Repeat("é", 700)})
		h.fake.set(ns+"/pool-p-1", memberPlan{after: backend.StateProvisioning})
		p, m0 := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) { p.Spec.CreatingTimeout = &metav1.Duration{Duration: 3 * time.Second} })
		h.waitGone(t, m0, 15*time.Second)
		st := h.pool(t, p).Status
		if st.Failures != 1 || st.CreatingTimeouts != 0 || st.LastFailure == nil {
			t.Fatalf("after one failed member: failures %d, creatingTimeouts %d, lastFailure %+v", st.Failures, st.CreatingTimeouts, st.LastFailure)
		}
		lf := st.LastFailure
		if lf.Member != m0.Name || lf.Reason != kobev1.ReasonProvisionFailed || lf.TemplateHash == "" || lf.TemplateHash != m0.Spec.TemplateHash || lf.Time.IsZero() {
			t.Errorf("lastFailure = %+v, want %s ProvisionFailed with template %q", lf, m0.Name, m0.Spec.TemplateHash)
		}
		if !utf8.ValidString(lf.Message) || len(lf.Message) > 1024 || len(lf.Message) < 1020 || !strings.HasPrefix(lf.Message, "the backend reports the member failed: éé") {
			t.Errorf("lastFailure.message (%d bytes, valid UTF-8 %v) = %q", len(lf.Message), utf8.ValidString(lf.Message), lf.Message)
		}

		m1 := h.member(t, p, 1)
		h.waitGone(t, m1, 20*time.Second)
		st = h.pool(t, p).Status
		if st.Failures != 2 || st.CreatingTimeouts != 1 || st.LastFailure == nil || st.LastFailure.Member != m1.Name || st.LastFailure.Reason != kobev1.ReasonCreatingTimeout {
			t.Fatalf("after a second, reaped member: failures %d, creatingTimeouts %d, lastFailure %+v", st.Failures, st.CreatingTimeouts, st.LastFailure)
		}

		m2 := h.member(t, p, 2)
		ready := h.waitPhase(t, m2, kobev1.InstanceReady, 30*time.Second)
		if ready.Status.TimeToReady == nil {
			t.Errorf("member %s is Ready without timeToReady", m2.Name)
		}
		testenv.Eventually(t, 10*time.Second, "the failure streak reset", func() error {
			st = h.pool(t, p).Status
			return holds(st.Failures == 0 && st.CreatingTimeouts == 0, fmt.Sprintf("failures %d, creatingTimeouts %d", st.Failures, st.CreatingTimeouts))
		})
		if st.LastFailure == nil || st.LastFailure.Member != m1.Name {
			t.Errorf("lastFailure after the reset = %+v, want %s kept as history", st.LastFailure, m1.Name)
		}
		if err := h.c.Delete(t.Context(), m2); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m2, 15*time.Second)
	})

	t.Run("an unavailable backend is reported and retried with backoff, not in a hot loop", func(t *testing.T) {
		ns := h.namespace(t)
		h.fake.set(ns+"/pool-p-0", memberPlan{createErr: fmt.Errorf("%w: kube-apiserver is missing", backend.ErrUnavailable)})
		_, m := h.poolAndMember(t, ns, nil)
		testenv.Eventually(t, 10*time.Second, "Provisioned=False BackendUnavailable", func() error {
			got, _ := h.get(t, m)
			c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionProvisioned)
			return holds(c != nil && c.Reason == kobev1.ReasonBackendUnavailable && strings.Contains(c.Message, "kube-apiserver is missing"), fmt.Sprint(c))
		})
		first := h.fake.count(h.fake.creates, ns+"/"+m.Name)
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // measuring a rate over a fixed window
		}
		if n := h.fake.count(h.fake.creates, ns+"/"+m.Name) - first; n > 30 {
			t.Errorf("Create called %d times in 3s", n)
		}
		h.waitEvent(t, ns, m.Name, kobev1.ReasonBackendUnavailable)
		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
	})

	t.Run("a spec the backend cannot build says what to fix on the member", func(t *testing.T) {
		ns := h.namespace(t)
		h.fake.set(ns+"/pool-p-0", memberPlan{createErr: fmt.Errorf("%w: spec.cluster.version \"1.37\": needs x.y.z", backend.ErrInvalidSpec)})
		_, m := h.poolAndMember(t, ns, nil)
		testenv.Eventually(t, 10*time.Second, "Provisioned=False ProvisionFailed naming the field", func() error {
			got, _ := h.get(t, m)
			c := meta.FindStatusCondition(got.Status.Conditions, kobev1.ConditionProvisioned)
			return holds(c != nil && c.Reason == kobev1.ReasonProvisionFailed && strings.Contains(c.Message, "spec.cluster.version"), fmt.Sprint(c))
		})
		h.waitEvent(t, ns, m.Name, kobev1.ReasonProvisionFailed)
		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
	})

	t.Run("a bound member is Leased while its lease holds it and recycled when it ends", func(t *testing.T) {
		ns := h.namespace(t)
		p, m := h.poolAndMember(t, ns, nil)
		m2 := h.member(t, p, 1)
		m3 := h.member(t, p, 2)
		for _, x := range []*kobev1.ClusterInstance{m, m2, m3} {
			h.waitPhase(t, x, kobev1.InstanceReady, 30*time.Second)
		}
		l1 := h.bind(t, m, "l1")
		l2 := h.bind(t, m2, "l2")
		l3 := h.bind(t, m3, "l3")
		for _, x := range []*kobev1.ClusterInstance{m, m2, m3} {
			got := h.waitPhase(t, x, kobev1.InstanceLeased, 10*time.Second)
			if got.Status.LeaseRef == nil || got.Status.LeaseRef.Name != got.Spec.LeaseRef.Name {
				t.Errorf("status.leaseRef = %+v", got.Status.LeaseRef)
			}
		}

		// Released: noticed through the lease watch, within a second or so.
		start := time.Now()
		l1.Status.Phase = kobev1.LeaseReleased
		if err := h.c.Status().Update(t.Context(), l1); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 10*time.Second)
		t.Logf("released lease noticed and member destroyed in %s", time.Since(start).Round(100*time.Millisecond))

		// Deleted lease.
		if err := h.c.Delete(t.Context(), l2); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m2, 10*time.Second)

		// A lease that names another member.
		l3.Status.InstanceRef = &kobev1.ObjectRef{Name: "someone-else", UID: "x"}
		if err := h.c.Status().Update(t.Context(), l3); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m3, 10*time.Second)
		if f := h.failures(t, p); f != 0 {
			t.Errorf("pool failures = %d after leases ended", f)
		}
	})

	t.Run("a member is Leased from its own leaseRef; a second member naming the lease is recycled once the lease names the first", func(t *testing.T) {
		ns := h.namespace(t)
		p, m := h.poolAndMember(t, ns, nil)
		m2 := h.member(t, p, 1)
		for _, x := range []*kobev1.ClusterInstance{m, m2} {
			h.waitPhase(t, x, kobev1.InstanceReady, 30*time.Second)
		}
		// The API answered from the member's claim; the lease's status
		// copy is not written yet (and a late claim named a second member).
		l := h.claim(t, m, h.lease(t, m, "answered"))
		h.claim(t, m2, l)
		for _, x := range []*kobev1.ClusterInstance{m, m2} {
			h.waitPhase(t, x, kobev1.InstanceLeased, 10*time.Second)
		}
		cur, _ := h.get(t, m)
		l.Status.Phase = kobev1.LeaseBound
		l.Status.InstanceRef = &kobev1.ObjectRef{Name: cur.Name, UID: cur.UID}
		if err := h.c.Status().Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m2, 10*time.Second)
		if got, _ := h.get(t, m); got.Status.Phase != kobev1.InstanceLeased {
			t.Errorf("the member the lease names is %s, want Leased", got.Status.Phase)
		}
		// The lease ends: its member goes with it.
		l.Status.Phase = kobev1.LeaseReleased
		if err := h.c.Status().Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 10*time.Second)
	})

	t.Run("the start-up sweep asks backends about UIDs and lists live in its namespace, with rights there only, leaving other namespaces' members alone", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		got := h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		h.fake.mu.Lock()
		// Its member, an orphan of its namespace, and an unknown member of
		// another namespace (another installation's, sharing the data).
		h.fake.swept = []sweptMember{{ns, got.UID}, {ns, "orphan-uid"}, {"other-installation", "foreign-uid"}}
		h.fake.mu.Unlock()
		// As the chart's operator: allowed to list ClusterInstances in ns
		// and nowhere else, so a list of every namespace is refused.
		s := &SweepRunnable{Backends: backend.Registry{kobev1.BackendLocal: h.fake}, Namespace: ns, Reader: h.namespacedReader(t, ns)}
		if !s.NeedLeaderElection() {
			t.Error("the sweep must run on the leader only")
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		h.fake.mu.Lock()
		removed := h.fake.swept
		h.fake.mu.Unlock()
		if len(removed) != 1 || removed[0].uid != "orphan-uid" {
			t.Errorf("removed = %v, want only the orphan (the backend was not asked, its member not found owned, or another namespace's member judged)", removed)
		}
		if err := h.c.Delete(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		h.waitGone(t, m, 15*time.Second)
	})
}

// namespacedReader returns a client of an identity that may get, list and
// watch ClusterInstances in ns and do nothing else: the admin impersonates
// it, and the API server's RBAC decides.
func (h *harness) namespacedReader(t *testing.T, ns string) client.Reader {
	t.Helper()
	const user = "sweep-test"
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{kobev1.GroupVersion.Group}, Resources: []string{"clusterinstances"}, Verbs: []string{"get", "list", "watch"}}},
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	for _, o := range []client.Object{role, rb} {
		if err := h.c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(h.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: h.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// RBAC is enforced from the authorizer's cache: wait until the rights
	// hold, and check the bound is real (the cluster-wide list is refused).
	testenv.Eventually(t, 10*time.Second, "the Role holds", func() error {
		return c.List(t.Context(), &kobev1.ClusterInstanceList{}, client.InNamespace(ns))
	})
	if err := c.List(t.Context(), &kobev1.ClusterInstanceList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing ClusterInstances of every namespace as %s: %v, want Forbidden", user, err)
	}
	return c
}

// bind does what the binder does: the member names the lease first (its
// write-once leaseRef is the bind), then the lease records the bind.
func (h *harness) bind(t *testing.T, m *kobev1.ClusterInstance, name string) *kobev1.ClusterLease {
	t.Helper()
	l := h.claim(t, m, h.lease(t, m, name))
	cur, _ := h.get(t, m)
	l.Status.Phase = kobev1.LeaseBound
	l.Status.InstanceRef = &kobev1.ObjectRef{Name: cur.Name, UID: cur.UID}
	if err := h.c.Status().Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	return l
}

// lease creates a lease of m's pool, not bound.
func (h *harness) lease(t *testing.T, m *kobev1.ClusterInstance, name string) *kobev1.ClusterLease {
	t.Helper()
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.Namespace}, Spec: kobev1.ClusterLeaseSpec{Pool: m.Spec.PoolRef.Name}}
	if err := h.c.Create(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	return l
}

// claim writes the member's side of a bind to l, as the binder does.
func (h *harness) claim(t *testing.T, m *kobev1.ClusterInstance, l *kobev1.ClusterLease) *kobev1.ClusterLease {
	t.Helper()
	for {
		cur, _ := h.get(t, m)
		binding.SetMemberBinding(cur, l, time.Now())
		err := h.c.Update(t.Context(), cur)
		if err == nil {
			return l
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
}

// TestSetupRefusesMissingDependencies: a reconciler wired without what it
// needs fails at setup, naming what is missing, instead of panicking later.
func TestSetupRefusesMissingDependencies(t *testing.T) {
	full := func() *Reconciler {
		return &Reconciler{Client: fakeClient{}, Recorder: events.NewFakeRecorder(1), Backends: backend.Registry{}, Clock: clock.RealClock{}, Access: accesstest.Sealer()}
	}
	cases := []struct {
		missing string
		unset   func(*Reconciler)
	}{
		{"Client", func(r *Reconciler) { r.Client = nil }},
		{"Recorder", func(r *Reconciler) { r.Recorder = nil }},
		{"Backends", func(r *Reconciler) { r.Backends = nil }},
		{"Clock", func(r *Reconciler) { r.Clock = nil }},
		{"Access", func(r *Reconciler) { r.Access = nil }},
	}
	for _, tc := range cases {
		t.Run(tc.missing, func(t *testing.T) {
			r := full()
			tc.unset(r)
			err := r.SetupWithManager(nil) // refused before the manager is touched
			if err == nil || !strings.Contains(err.Error(), "missing "+tc.missing) {
				t.Errorf("SetupWithManager = %v, want it to name %s", err, tc.missing)
			}
		})
	}
	r := &Reconciler{}
	if err := r.validate(); err == nil || !strings.Contains(err.Error(), "missing Access, Backends, Client, Clock, Recorder") {
		t.Errorf("validate() = %v, want every missing dependency named", err)
	}
}

// fakeClient only has to be non-nil: setup is refused before it is used.
type fakeClient struct{ client.Client }
