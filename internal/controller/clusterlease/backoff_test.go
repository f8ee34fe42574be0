//go:build integration

package clusterlease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// logSink keeps a manager's log entries, parsed.
type logSink struct {
	mu      sync.Mutex
	entries []map[string]any
}

func (s *logSink) add(obj string) {
	var e map[string]any
	if err := json.Unmarshal([]byte(obj), &e); err != nil {
		e = map[string]any{"unparsed": obj}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, e)
}

func (s *logSink) matching(pred func(map[string]any) bool) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, e := range s.entries {
		if pred(e) {
			out = append(out, e)
		}
	}
	return out
}

// claims records when the binder claimed each lease (status written Bound).
type claims struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (c *claims) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[name] = append(c.at[name], time.Now())
}

func (c *claims) of(name string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at[name]...)
}

// TestFailingBindBacksOff: a bind that keeps failing is neither silent nor
// a hot loop, although its lease's status writes (its queue position) wake
// the controller at once. Members of pool "race" always answer
// Conflict (another writer keeps winning: a lost race); members of pool
// "refused" answer Forbidden (the API server refuses). For each, the binder's
// tries are spaced by at least the growing wait, and the reason is logged.
func TestFailingBindBacksOff(t *testing.T) {
	env := shared.env
	ns := env.NewNamespace(t)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: kobev1.GroupVersion.Group, Resource: "clusterinstances"}, "m", errors.New("RBAC says no"))
	tried := &claims{at: map[string][]time.Time{}}
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// A try is one call of the binder: it lists the pool's members, then
	// writes a claim (a claim that meets a Conflict re-reads the member and
	// writes once more in the same try). The first write after a list is a
	// try; telling tries apart by the time between writes failed on a loaded
	// machine, where the re-read alone took over 100ms.
	var listed sync.Map // pool -> listed since its last recorded try
	faulty := interceptor.NewClient(direct, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			if inst, ok := o.(*kobev1.ClusterInstance); ok && inst.Namespace == ns && inst.Spec.LeaseRef != nil {
				pool := inst.Labels[kobev1.LabelPool]
				if _, first := listed.LoadAndDelete(pool); first {
					tried.add(inst.Spec.LeaseRef.Name)
				}
				switch pool {
				case "race":
					return apierrors.NewConflict(schema.GroupResource{Group: kobev1.GroupVersion.Group, Resource: "clusterinstances"}, inst.Name, errors.New("someone else wrote first"))
				case "refused":
					return forbidden
				}
			}
			return c.Update(ctx, o, opts...)
		},
	})

	logs := &logSink{}
	opts := env.ManagerOptions(ns)
	opts.Logger = funcr.NewJSON(logs.add, funcr.Options{Verbosity: 1})
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	clk := clock.RealClock{}
	r := &clusterlease.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Binder:   &binding.Binder{Client: faulty, Reader: &poolListSpy{Reader: mgr.GetClient(), listed: &listed}, Clock: clk},
		Recorder: mgr.GetEventRecorder("test"), Clock: clk,
		Retention: time.Hour,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}

	h := &harness{t: t, c: env.Client, ns: ns}
	for _, pool := range []string{"race", "refused"} {
		h.pool(pool, time.Hour)
		h.member(pool)
		h.lease(pool+"-lease", pool, time.Hour)
	}
	testenv.StartManager(t, mgr)

	const tries = 5 // at 0, 0.2, 0.6, 1.4 and 3.0 s
	for _, name := range []string{"race-lease", "refused-lease"} {
		h.eventually(20*time.Second, fmt.Sprintf("%d tries to bind %s", tries, name), func() error {
			if n := len(tried.of(name)); n < tries {
				return fmt.Errorf("%d tries so far", n)
			}
			return nil
		})
		at := tried.of(name)
		if len(at) < tries {
			t.Fatalf("%s: %d separate tries, want %d: %v", name, len(at), tries, tried.of(name))
		}
		for i := 1; i < tries; i++ {
			// The wait counts from the failure, which comes after the try's
			// first write: allow 100ms for the try itself.
			gap, want := at[i].Sub(at[i-1]), lease.BindRetryAfter(i)-100*time.Millisecond
			if gap < want {
				t.Errorf("%s: try %d came %s after the previous one, want at least %s: %v", name, i+1, gap, want, at[:tries])
			}
		}
		// A failed claim leaves the lease queued, naming no member.
		if l := h.get(name); l.Status.Phase != kobev1.LeasePending || l.Status.InstanceRef != nil {
			t.Errorf("%s: phase %s, instance %+v; want Pending, none", name, l.Status.Phase, l.Status.InstanceRef)
		}
	}

	// The lost race is logged with its reason, loudly once it keeps
	// happening, with a growing wait.
	str := func(e map[string]any, k string) string { s, _ := e[k].(string); return s }
	races := logs.matching(func(e map[string]any) bool {
		return str(e, "msg") == "Bind failed, retrying" && str(e, "reason") == "LostRace" && strings.Contains(fmt.Sprint(e["ClusterLease"]), "race-lease")
	})
	var waits []time.Duration
	loud := 0
	for _, e := range races {
		d, err := time.ParseDuration(str(e, "retryAfter"))
		if err != nil {
			t.Fatalf("retryAfter in %v: %v", e, err)
		}
		waits = append(waits, d)
		if e["level"] == float64(0) {
			loud++
		}
	}
	if len(waits) < tries-1 || loud == 0 {
		t.Fatalf("lost races logged: %v (%d at the default level); want at least %d, the later ones at the default level", waits, loud, tries-1)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] <= waits[i-1] && waits[i] < lease.BindRetryMax {
			t.Errorf("logged waits do not grow: %v", waits)
		}
	}
	// The refusal is returned to controller-runtime, which logs it with the
	// reason and the API server's words.
	refusals := logs.matching(func(e map[string]any) bool {
		return str(e, "msg") == "Reconciler error" && strings.Contains(str(e, "error"), "APIServerRefused") &&
			strings.Contains(str(e, "error"), "RBAC says no") && strings.Contains(fmt.Sprint(e["ClusterLease"]), "refused-lease")
	})
	if len(refusals) == 0 {
		t.Errorf("no logged refusal for refused-lease; log: %v", logs.matching(func(e map[string]any) bool { return str(e, "msg") != "" }))
	}
}

// poolListSpy marks a pool in listed whenever its members are listed by
// pool (the binder's first step).
type poolListSpy struct {
	client.Reader
	listed *sync.Map
}

func (s *poolListSpy) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*kobev1.ClusterInstanceList); ok {
		lo := (&client.ListOptions{}).ApplyOptions(opts)
		if lo.FieldSelector != nil {
			if pool, found := lo.FieldSelector.RequiresExactMatch(index.InstancePool); found {
				s.listed.Store(pool, true)
			}
		}
	}
	return s.Reader.List(ctx, list, opts...)
}

// TestSetupRefusesMissingDependencies: a Reconciler without one of its
// required fields fails SetupWithManager, naming the field, instead of
// panicking at its first reconcile.
func TestSetupRefusesMissingDependencies(t *testing.T) {
	env := shared.env
	full := func() *clusterlease.Reconciler {
		return &clusterlease.Reconciler{
			Client: env.Client, APIReader: env.Client,
			Binder:   &binding.Binder{Client: env.Client, Reader: env.Client, Clock: clock.RealClock{}},
			Recorder: events.NewFakeRecorder(10), Clock: clock.RealClock{},
		}
	}
	tests := []struct {
		field  string
		remove func(r *clusterlease.Reconciler)
	}{
		{"Client", func(r *clusterlease.Reconciler) { r.Client = nil }},
		{"APIReader", func(r *clusterlease.Reconciler) { r.APIReader = nil }},
		{"Binder", func(r *clusterlease.Reconciler) { r.Binder = nil }},
		{"Binder.Client", func(r *clusterlease.Reconciler) { r.Binder.Client = nil }},
		{"Binder.Reader", func(r *clusterlease.Reconciler) { r.Binder.Reader = nil }},
		{"Binder.Clock", func(r *clusterlease.Reconciler) { r.Binder.Clock = nil }},
		{"Recorder", func(r *clusterlease.Reconciler) { r.Recorder = nil }},
		{"Clock", func(r *clusterlease.Reconciler) { r.Clock = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			r := full()
			tt.remove(r)
			err := r.SetupWithManager(env.NewManager(t, "default"))
			if err == nil || !strings.Contains(err.Error(), "missing "+tt.field) {
				t.Fatalf("SetupWithManager without %s = %v, want an error naming it", tt.field, err)
			}
		})
	}
	if err := full().SetupWithManager(env.NewManager(t, "default")); err != nil {
		t.Fatalf("SetupWithManager with every dependency: %v", err)
	}
}
