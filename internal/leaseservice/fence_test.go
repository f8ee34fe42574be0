//go:build integration

package leaseservice_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
)

// fenceRecorder is a backend.Fencer wired as the operator wires them, in a
// backend.Registry under the pools' backend type. It records each member it
// is asked to fence with the phase its lease had on the API server then.
type fenceRecorder struct {
	backend.Backend // never called: only Fence is
	mu              sync.Mutex
	calls           []fenceCall
	// fence, when set, runs in place of success.
	fence func(ctx context.Context) error
}

type fenceCall struct {
	member     backend.Member
	leasePhase kobev1.LeasePhase
}

func (f *fenceRecorder) Fence(ctx context.Context, m backend.Member) error {
	l := &kobev1.ClusterLease{}
	if m.Spec.LeaseRef != nil {
		_ = fx.env.Client.Get(ctx, clientKey(m.Spec.LeaseRef.Name), l)
	}
	f.mu.Lock()
	f.calls = append(f.calls, fenceCall{member: m, leasePhase: l.Status.Phase})
	f.mu.Unlock()
	if f.fence != nil {
		return f.fence(ctx)
	}
	return nil
}

// take returns the calls so far and forgets them.
func (f *fenceRecorder) take() []fenceCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// TestReleaseFencesBeforeAnswering: Release stops the API server of the
// member its lease held (through the backend's Fencer) after the lease is
// Released and before it returns, so that the holder's credentials are cut
// whatever happens to the operator's leader next. Nobody else's member is
// ever fenced: not by another caller's release, not through a forged
// status. A fence that fails or hangs does not fail or hold up the release.
func TestReleaseFencesBeforeAnswering(t *testing.T) {
	makePool(t, "fence", 14)
	rec := &fenceRecorder{}
	reg := backend.Registry{kobev1.BackendLocal: rec}
	var logged strings.Builder
	var logMu sync.Mutex
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		logged.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{})
	s := newService(func(o *leaseservice.Options) { o.Fence = reg.Fence; o.Log = log; o.FenceTimeout = 2 * time.Second })
	plain := newService()
	rule := kobev1.AccessRule{Pools: []string{"fence"}}
	p, stranger := caller("fence-holder", rule), caller("fence-stranger", rule)
	ctx := t.Context()

	requireFenced := func(t *testing.T, l *leaseservice.Lease, calls []fenceCall) {
		t.Helper()
		m := memberOf(t, l.Object.Name)
		if len(calls) != 1 || calls[0].member.UID != m.UID || calls[0].member.Name != m.Name {
			t.Fatalf("fenced %+v, want member %s (uid %s) once", calls, m.Name, m.UID)
		}
		if calls[0].leasePhase != kobev1.LeaseReleased {
			t.Errorf("the fence ran while the lease was %q, want Released", calls[0].leasePhase)
		}
	}

	t.Run("a bound lease's member, before Release returns", func(t *testing.T) {
		for _, recorded := range []bool{false, true} {
			l := mustCreate(t, s, p, "fence")
			if recorded { // else the status copy of the bind may be unwritten yet
				waitRecorded(t, l.Object.Name)
			}
			// Another caller's release of it fences nothing.
			if err := s.Release(ctx, stranger, l.Object.Name); err != nil {
				t.Fatal(err)
			}
			if calls := rec.take(); len(calls) != 0 {
				t.Fatalf("another caller's release fenced %+v", calls)
			}
			if err := s.Release(ctx, p, l.Object.Name); err != nil {
				t.Fatal(err)
			}
			requireFenced(t, l, rec.take())
			// Releasing it again is a no-op.
			if err := s.Release(ctx, p, l.Object.Name); err != nil {
				t.Fatal(err)
			}
			if calls := rec.take(); len(calls) != 0 {
				t.Fatalf("a second release fenced %+v", calls)
			}
		}
	})

	t.Run("a failing fence is logged and the release stands", func(t *testing.T) {
		rec.fence = func(context.Context) error { return errors.New("kube-apiserver would not die") }
		defer func() { rec.fence = nil }()
		l := mustCreate(t, s, p, "fence")
		if err := s.Release(ctx, p, l.Object.Name); err != nil {
			t.Fatalf("Release with a failing fence: %v, want nil", err)
		}
		requireFenced(t, l, rec.take())
		if got := leaseObject(t, l.Object.Name).Status.Phase; got != kobev1.LeaseReleased {
			t.Fatalf("lease %s is %s, want Released", l.Object.Name, got)
		}
		logMu.Lock()
		out := logged.String()
		logMu.Unlock()
		if !strings.Contains(out, "Fencing the member of a released lease failed") || !strings.Contains(out, "kube-apiserver would not die") || !strings.Contains(out, l.Object.Name) {
			t.Errorf("the failed fence was not logged with its lease and cause:\n%s", out)
		}
	})

	t.Run("a caller who hangs up does not call the fence off; a hung fence holds the answer at most FenceTimeout", func(t *testing.T) {
		l := mustCreate(t, s, p, "fence")
		callerCtx, hangUp := context.WithCancel(ctx)
		defer hangUp()
		var afterHangUp error
		rec.fence = func(ctx context.Context) error {
			hangUp()
			time.Sleep(50 * time.Millisecond)
			afterHangUp = ctx.Err()
			<-ctx.Done() // hung
			return ctx.Err()
		}
		defer func() { rec.fence = nil }()
		start := time.Now()
		if err := s.Release(callerCtx, p, l.Object.Name); err != nil {
			t.Fatalf("Release: %v", err)
		}
		took := time.Since(start)
		requireFenced(t, l, rec.take())
		if afterHangUp != nil {
			t.Errorf("the fence's context ended with the caller's: %v", afterHangUp)
		}
		if took < 2*time.Second || took > 4*time.Second {
			t.Errorf("Release with a hung fence answered after %s, want about 2s", took)
		}
	})

	t.Run("no member, or a member the lease's status names without its bind: nothing fenced", func(t *testing.T) {
		makePool(t, "fence-empty", 0)
		victim := memberOf(t, mustCreate(t, plain, caller("fence-victim", kobev1.AccessRule{Pools: []string{"fence"}}), "fence").Object.Name)
		forger := caller("fence-forger", kobev1.AccessRule{Pools: []string{"fence-empty"}})
		for _, forge := range []bool{false, true} {
			l := mustCreate(t, s, forger, "fence-empty")
			if l.Bound() {
				t.Fatalf("a lease of an empty pool is bound: %+v", l.Object.Status)
			}
			if forge {
				obj := leaseObject(t, l.Object.Name)
				now := metav1.NewTime(time.Now().Truncate(time.Second))
				exp := metav1.NewTime(now.Add(time.Hour))
				obj.Status = kobev1.ClusterLeaseStatus{Phase: kobev1.LeaseBound, InstanceRef: &kobev1.ObjectRef{Name: victim.Name, UID: victim.UID}, BoundAt: &now, ExpiresAt: &exp}
				if err := fx.env.Client.Status().Update(ctx, obj); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Release(ctx, forger, l.Object.Name); err != nil {
				t.Fatal(err)
			}
			if calls := rec.take(); len(calls) != 0 {
				t.Fatalf("releasing a lease without a member (forged status: %v) fenced %+v", forge, calls)
			}
		}
	})

	t.Run("added latency", func(t *testing.T) {
		// Not a bound on anything: the fence itself is the backend's; what
		// Release adds around it is one read of the member.
		timeRelease := func(svc *leaseservice.Service) time.Duration {
			l := mustCreate(t, svc, p, "fence")
			waitRecorded(t, l.Object.Name)
			start := time.Now()
			if err := svc.Release(ctx, p, l.Object.Name); err != nil {
				t.Fatal(err)
			}
			return time.Since(start)
		}
		noop := newService(func(o *leaseservice.Options) {
			o.Fence = func(context.Context, *kobev1.ClusterInstance) error { return nil }
		})
		for range 3 {
			without, with := timeRelease(plain), timeRelease(noop)
			t.Logf("Release took %s without a fence hook, %s with one that returns at once", without, with)
		}
	})
}

func mustCreate(t *testing.T, s *leaseservice.Service, p *auth.Principal, pool string) *leaseservice.Lease {
	t.Helper()
	l, err := s.Create(t.Context(), p, leaseservice.CreateRequest{Pool: pool})
	if err != nil {
		t.Fatalf("Create in pool %s: %v", pool, err)
	}
	return l
}

// memberOf reads, from the API server, the member whose leaseRef names lease.
func memberOf(t *testing.T, lease string) *kobev1.ClusterInstance {
	t.Helper()
	var ms kobev1.ClusterInstanceList
	if err := fx.env.Client.List(t.Context(), &ms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range ms.Items {
		if ref := ms.Items[i].Spec.LeaseRef; ref != nil && ref.Name == lease {
			return &ms.Items[i]
		}
	}
	t.Fatalf("no member names lease %s", lease)
	return nil
}
