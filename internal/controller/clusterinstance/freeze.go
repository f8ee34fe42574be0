package clusterinstance

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/gates"
)

// Frozen warm members (backend.Freezer): the pool controller asks for a
// member to be frozen or thawed with spec.frozen; this controller does it
// and says so in the Frozen condition, which lease.Running reads:
//
//	spec.frozen  Frozen condition        what happens here
//	true         absent/False            write True (fenced), then freeze
//	true         True                    keep it frozen
//	false        True or False Thawing   thaw, probe; False Thawed once /readyz answers
//	false        absent or False Thawed  the member runs: the usual health probes
//
// The condition is written before the processes stop, fenced by the
// member's resourceVersion, so a binder that read the member before that
// write cannot claim it afterwards, and one that claimed it first makes the
// write fail. A member is handed out again only once a probe after its thaw
// passed.

// thawTimeout is how long a thawed member may take to answer /readyz before
// it is recycled as unhealthy (a thaw takes about a second).
const thawTimeout = 30 * time.Second

// thawRetry is how soon a thawed member that does not answer yet is probed
// again: a lease may be waiting for it.
const thawRetry = 200 * time.Millisecond

// reconcileFreeze freezes or thaws a Ready member as its spec asks.
// handled is false when the member runs and was checked: the caller's
// health probes apply.
func (r *Reconciler) reconcileFreeze(ctx context.Context, s *scope) (res ctrl.Result, handled bool, err error) {
	c := meta.FindStatusCondition(s.inst.Status.Conditions, kobev1.ConditionFrozen)
	isFrozen := c != nil && c.Status == metav1.ConditionTrue
	thawing := c != nil && c.Status == metav1.ConditionFalse && c.Reason == kobev1.ReasonThawing
	if !s.inst.Spec.Frozen && !isFrozen && !thawing {
		return ctrl.Result{}, false, nil
	}
	f, canFreeze := s.backend.(backend.Freezer)
	if canFreeze {
		canFreeze, _ = f.CanFreeze()
	}
	if s.inst.Spec.Frozen {
		if !canFreeze {
			// The pool controller clears spec.frozen on pools whose
			// backend cannot freeze here; until then the member waits.
			return ctrl.Result{}, true, nil
		}
		return r.freeze(ctx, s, f, isFrozen)
	}
	return r.thaw(ctx, s, f, c)
}

// freeze records the Frozen condition, then stops the member's processes.
func (r *Reconciler) freeze(ctx context.Context, s *scope, f backend.Freezer, recorded bool) (ctrl.Result, bool, error) {
	if !recorded {
		r.setCondition(s, kobev1.ConditionFrozen, metav1.ConditionTrue, kobev1.ReasonFrozen,
			"frozen while it waits for a lease (the pool's warm.running); thawed and checked before it is handed out")
		if err := s.patch.Status(ctx); err != nil || s.patch.Done() {
			return ctrl.Result{}, true, err
		}
	}
	if err := f.Freeze(ctx, s.member()); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("freezing member %s: %w", s.inst.Name, err)
	}
	// A frozen member is not probed; its thaw is. The health interval
	// still looks at it, so that a member whose processes died while
	// frozen is noticed (the backend's Observe reports it Failed).
	obs, err := s.backend.Observe(ctx, s.member())
	if err != nil {
		return ctrl.Result{}, true, fmt.Errorf("observing frozen member %s: %w", s.inst.Name, err)
	}
	if obs.State != backend.StateReady {
		res, err := r.recycle(ctx, s, kobev1.ReasonUnhealthy, fmt.Sprintf("frozen member: backend reports %s: %s", obs.State, obs.Message))
		return res, true, err
	}
	return ctrl.Result{RequeueAfter: s.settings.interval}, true, nil
}

// nodeSettle is how long after a thaw the nodes of a member are checked:
// its kube-controller-manager thaws with a node lease it last saw renewed
// before the freeze, and marks a node NotReady on its first node monitor
// pass (every 5 s) unless it sees the kubelet's renewal first; the kubelet
// sets it Ready again within its status update period (10 s). Measured: a
// member frozen for 60 s had its node NotReady from its thaw for 10 s. A
// hand-out in that window would get a node that schedules nothing.
const nodeSettle = 6 * time.Second

// thaw resumes the member and checks it; it may be handed out once the
// check passed (Frozen False, Thawed): its API server answers /readyz and,
// with nodes, nodeSettle after the thaw, every node is Ready. One that
// does not pass within thawTimeout of its thaw is recycled.
func (r *Reconciler) thaw(ctx context.Context, s *scope, f backend.Freezer, c *metav1.Condition) (ctrl.Result, bool, error) {
	since := s.now // the thaw starts now, unless an earlier pass started it
	if c.Status == metav1.ConditionFalse {
		since = c.LastTransitionTime.Time
	}
	var err error
	if f != nil {
		err = f.Thaw(ctx, s.member())
	}
	if err == nil {
		err = r.probe(ctx, s)
	}
	if n := memberNodes(s.inst); err == nil && n > 0 {
		if wait := nodeSettle - s.now.Sub(since); wait > 0 {
			r.setCondition(s, kobev1.ConditionFrozen, metav1.ConditionFalse, kobev1.ReasonThawing,
				"thawed; checking its nodes once the node controller has seen their kubelets again")
			return ctrl.Result{RequeueAfter: wait}, true, nil
		}
		err = r.nodesReady(ctx, s, n)
	}
	if err == nil {
		t := metav1.NewTime(s.now)
		s.inst.Status.LastHealthCheck = &t
		s.inst.Status.HealthFailures = 0
		r.setCondition(s, kobev1.ConditionHealthy, metav1.ConditionTrue, kobev1.ReasonProbeSucceeded, "GET /readyz succeeded after the thaw")
		r.setCondition(s, kobev1.ConditionFrozen, metav1.ConditionFalse, kobev1.ReasonThawed, "thawed; its API server answered /readyz")
		return ctrl.Result{RequeueAfter: s.settings.interval}, true, nil
	}
	if s.now.Sub(since) >= thawTimeout {
		res, err := r.recycle(ctx, s, kobev1.ReasonUnhealthy, fmt.Sprintf("not healthy %s after its thaw: %v", thawTimeout, err))
		return res, true, err
	}
	r.setCondition(s, kobev1.ConditionFrozen, metav1.ConditionFalse, kobev1.ReasonThawing, "thawed; waiting for /readyz: "+err.Error())
	return ctrl.Result{RequeueAfter: thawRetry}, true, nil
}

// thawLeased thaws a bound member whose processes are frozen. A bound
// member is never asked to freeze (the CRD and the fenced Frozen condition
// see to that), but a replica that lost its leadership in the middle of a
// Freeze may finish it after the new leader thawed the member and handed
// it out: the holder must not keep a cluster that answers nothing.
func (r *Reconciler) thawLeased(ctx context.Context, s *scope) {
	f, ok := s.backend.(backend.Freezer)
	if !ok {
		return
	}
	if frozen, err := f.Frozen(s.member()); err != nil || !frozen {
		return
	}
	if err := f.Thaw(ctx, s.member()); err != nil {
		s.log.Error(err, "Thawing a bound member")
		return
	}
	s.log.Info("Thawed a bound member that was frozen")
}

// memberNodes is how many real nodes the member was built with.
func memberNodes(inst *kobev1.ClusterInstance) int32 {
	b := inst.Spec.Backend
	switch {
	case b.Local != nil && b.Local.Nodes != nil:
		return *b.Local.Nodes
	case b.Kubernetes != nil && b.Kubernetes.Nodes != nil:
		return *b.Kubernetes.Nodes
	}
	return 0
}

// nodesReady checks that n nodes of the member are Ready.
func (r *Reconciler) nodesReady(ctx context.Context, s *scope, n int32) error {
	kubeconfig, err := r.adminKubeconfig(ctx, s)
	if err != nil {
		return err
	}
	return gates.NodesReady(ctx, kubeconfig, n, r.probeTimeout(s))
}
