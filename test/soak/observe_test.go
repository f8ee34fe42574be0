//go:build soak

package soak

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// recorder is the checker behind a mutex, with what the harness measures
// besides: hand-out latencies and the faults injected.
type recorder struct {
	mu        sync.Mutex
	c         *Checker
	handouts  []handout
	faults    []fault
	refused   map[string]int
	postsCut  int
	errs      map[string]int
	releaseKO map[int]int
}

// handout is one lease from its POST to its kubeconfig.
type handout struct {
	start   time.Time
	took    time.Duration
	pending bool
}

// fault is one injected fault.
type fault struct {
	kind, target string
	at           time.Time
	// recovered is how long until what it broke served again.
	recovered time.Duration
	// lingered is how long a stopped leader ran on after SIGCONT.
	lingered time.Duration
	err      string
}

func newRecorder() *recorder {
	return &recorder{
		c:       NewChecker(Limits{ExpiryGrace: 5 * time.Second, StuckAfter: 60 * time.Second}),
		refused: map[string]int{}, errs: map[string]int{}, releaseKO: map[int]int{},
	}
}

func (r *recorder) do(f func(c *Checker)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r.c)
}

func (r *recorder) note(f func(r *recorder)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// watchAPI feeds the checker every change of the namespace's members and
// leases, from informers that relist on their own across API server
// restarts.
func watchAPI(ctx context.Context, ns string, rec *recorder) error {
	ca, err := cache.New(suite.env.Config, cache.Options{Scheme: suite.env.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return err
	}
	for obj, h := range map[client.Object]toolscache.ResourceEventHandlerFuncs{
		&kobev1.ClusterInstance{}: handler(rec, onMemberSeen, onMemberGone),
		&kobev1.ClusterLease{}:    handler(rec, onLeaseSeen, onLeaseGone),
	} {
		inf, err := ca.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return fmt.Errorf("the soak's watch of %s did not sync", ns)
	}
	return nil
}

// handler turns informer events into observations, stamped on arrival.
func handler[T client.Object](rec *recorder, seen func(*Checker, time.Time, T), gone func(*Checker, time.Time, T)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				rec.do(func(c *Checker) { seen(c, time.Now(), o) })
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				rec.do(func(c *Checker) { seen(c, time.Now(), o) })
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(T); ok {
				rec.do(func(c *Checker) { gone(c, time.Now(), o) })
			}
		},
	}
}

func onMemberSeen(c *Checker, at time.Time, m *kobev1.ClusterInstance) {
	c.ObserveMember(at, toMember(m))
}
func onMemberGone(c *Checker, at time.Time, m *kobev1.ClusterInstance) {
	c.ObserveMemberGone(at, m.UID)
}
func onLeaseSeen(c *Checker, at time.Time, l *kobev1.ClusterLease) { c.ObserveLease(at, toLease(l)) }
func onLeaseGone(c *Checker, at time.Time, l *kobev1.ClusterLease) { c.ObserveLeaseGone(at, l.Name) }

func toMember(m *kobev1.ClusterInstance) Member {
	out := Member{Name: m.Name, UID: m.UID, Pool: m.Labels[kobev1.LabelPool], Deleting: m.DeletionTimestamp != nil}
	if ref := m.Spec.LeaseRef; ref != nil {
		out.LeaseName, out.LeaseUID = ref.Name, ref.UID
	}
	return out
}

func toLease(l *kobev1.ClusterLease) Lease {
	out := Lease{Name: l.Name, UID: l.UID, Phase: string(l.Status.Phase)}
	if ref := l.Status.InstanceRef; ref != nil {
		out.MemberName, out.MemberUID = ref.Name, ref.UID
	}
	if l.Status.ExpiresAt != nil {
		out.ExpiresAt = l.Status.ExpiresAt.Time
	}
	if l.Status.EndedAt != nil {
		out.EndedAt = l.Status.EndedAt.Time
	}
	if cond := apimeta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded); cond != nil && cond.Status == "True" {
		out.EndReason = cond.Reason
	}
	return out
}

// leaderLeaseName is the operator's leader-election Lease.
const leaderLeaseName = "kobe-operator.kobe.kunobi.ninja"

// leaderStale: a leader lease not renewed for this long has no acting
// leader (renewals come every --leader-elect-retry-period, 2 s).
const leaderStale = 5 * time.Second

// sampleLeader reads the leader lease every 500 ms until ctx ends and
// tells the checker whether a leader renews.
func sampleLeader(ctx context.Context, ns string, rec *recorder) error {
	cfg := rest.CopyConfig(suite.env.Config)
	cfg.Timeout = 2 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: suite.env.Scheme})
	if err != nil {
		return err
	}
	go func() {
		var lastRenew time.Time
		for ctx.Err() == nil {
			var l coordinationv1.Lease
			err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: leaderLeaseName}, &l)
			now := time.Now()
			if err == nil && l.Spec.RenewTime != nil {
				lastRenew = l.Spec.RenewTime.Time
			}
			acting := err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && now.Sub(lastRenew) < leaderStale
			rec.do(func(c *Checker) { c.ObserveLeader(now, acting, lastRenew) })
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return nil
}

// tickChecker runs the checker's time-based checks every second until ctx
// ends, printing each new violation as it is found. A lease the watch still
// shows Bound past its expiry is read live first: after a kube-apiserver
// restart the watch can lag the lease's end by seconds, and the checker
// judges the operator, not its own watch.
func tickChecker(ctx context.Context, ns string, rec *recorder) {
	cfg := rest.CopyConfig(suite.env.Config)
	cfg.Timeout = 2 * time.Second
	live, err := client.New(cfg, client.Options{Scheme: suite.env.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: live reads for the checker:", err)
		return
	}
	reported := 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		var overdue []string
		rec.do(func(c *Checker) { overdue = c.Overdue(time.Now()) })
		for _, name := range overdue {
			var l kobev1.ClusterLease
			err := live.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &l)
			now := time.Now()
			switch {
			case err == nil:
				rec.do(func(c *Checker) { c.ObserveLease(now, toLease(&l)) })
			case apierrors.IsNotFound(err):
				rec.do(func(c *Checker) { c.ObserveLeaseGone(now, name) })
			}
			// Any other error: the API server is away; the watch's view
			// stands.
		}
		rec.do(func(c *Checker) {
			c.Tick(time.Now())
			vs := c.Violations()
			for _, v := range vs[reported:] {
				fmt.Fprintln(os.Stderr, "soak: VIOLATION", v)
			}
			reported = len(vs)
		})
	}
}
