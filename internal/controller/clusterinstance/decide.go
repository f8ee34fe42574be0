package clusterinstance

import (
	"fmt"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// Defaults for pools that leave these unset. Health checks run even when a
// pool has no healthCheck block: a member that died while waiting must never
// be handed out, and spec 000 documents 30s/3 as the usual settings.
const (
	DefaultCreatingTimeout  = 10 * time.Minute
	DefaultHealthInterval   = 30 * time.Second
	DefaultFailureThreshold = 3
)

// settings are what an instance takes from its pool; a member whose pool is
// gone (it was leased and its pool deleted) uses the defaults. Its gates
// also depend on the member's own backend spec (copied from the pool when
// it was created): a member with real nodes always waits for NodesReady.
type settings struct {
	creatingTimeout time.Duration
	interval        time.Duration
	threshold       int32
	gates           []kobev1.ReadinessGate
	// bootstraps are the pool's BootstrapConfigs, applied before the gates.
	bootstraps []kobev1.BootstrapRef
	// nodes is how many real nodes the member asks for; NodesReady then
	// probes each of them with a pod.
	nodes int32
}

func settingsFor(p *kobev1.ClusterPool, inst *kobev1.ClusterInstance) settings {
	s := settings{
		creatingTimeout: DefaultCreatingTimeout,
		interval:        DefaultHealthInterval,
		threshold:       DefaultFailureThreshold,
		gates:           pool.MemberGates(pool.RealNodes(inst.Spec.Backend), nil),
		nodes:           pool.RealNodes(inst.Spec.Backend),
	}
	if p == nil {
		return s
	}
	if p.Spec.CreatingTimeout != nil && p.Spec.CreatingTimeout.Duration > 0 {
		s.creatingTimeout = p.Spec.CreatingTimeout.Duration
	}
	if hc := p.Spec.HealthCheck; hc != nil {
		if hc.IntervalSeconds > 0 {
			s.interval = time.Duration(hc.IntervalSeconds) * time.Second
		}
		if hc.FailureThreshold > 0 {
			s.threshold = hc.FailureThreshold
		}
	}
	s.gates = pool.MemberGates(pool.RealNodes(inst.Spec.Backend), p.Spec.ReadinessGates)
	s.bootstraps = p.Spec.Bootstraps
	return s
}

// creatingSince is when the member entered Creating.
func creatingSince(inst *kobev1.ClusterInstance) time.Time {
	if t := inst.Status.LastPhaseChange; t != nil && inst.Status.Phase == kobev1.InstanceCreating {
		return t.Time
	}
	return inst.CreationTimestamp.Time
}

// creatingLeft is how long the member may still stay Creating; <= 0 means
// it has timed out.
func creatingLeft(inst *kobev1.ClusterInstance, timeout time.Duration, now time.Time) time.Duration {
	return creatingSince(inst).Add(timeout).Sub(now)
}

// healthDue is how long until the next probe of a Ready member; <= 0 means now.
func healthDue(inst *kobev1.ClusterInstance, interval time.Duration, now time.Time) time.Duration {
	if inst.Status.LastHealthCheck == nil {
		return 0
	}
	return inst.Status.LastHealthCheck.Add(interval).Sub(now)
}

// healthVerdict returns the consecutive failure count after a probe and
// whether the member must be recycled.
func healthVerdict(failures int32, probeErr error, threshold int32) (int32, bool) {
	if probeErr == nil {
		return 0, false
	}
	failures++
	return failures, failures >= threshold
}

// leaseState is what a member's lease says about the member.
type leaseState int

const (
	// leaseActive: the lease holds this member. The member's leaseRef is
	// the record of the bind; the lease's status, a copy written after it,
	// may not name the member yet.
	leaseActive leaseState = iota
	// leaseEnded: the lease ended, is being deleted, is gone, or its status
	// names another member; the member must be destroyed.
	leaseEnded
)

// judgeLease decides from the lease named by inst.spec.leaseRef (nil when it
// does not exist) whether the member is still held. A lease whose status
// names another member holds that one: two members naming one lease (a
// claim applied after its binder gave up) leave only the one the lease's
// status copy names.
func judgeLease(inst *kobev1.ClusterInstance, l *kobev1.ClusterLease) (leaseState, string) {
	ref := inst.Spec.LeaseRef
	switch {
	case l == nil:
		return leaseEnded, fmt.Sprintf("lease %s is gone", ref.Name)
	case ref.UID != "" && l.UID != ref.UID:
		return leaseEnded, fmt.Sprintf("lease %s was deleted and re-created", ref.Name)
	case !l.DeletionTimestamp.IsZero():
		return leaseEnded, fmt.Sprintf("lease %s is being deleted", l.Name)
	case l.Status.InstanceRef != nil && (l.Status.InstanceRef.Name != inst.Name ||
		(l.Status.InstanceRef.UID != "" && l.Status.InstanceRef.UID != inst.UID)):
		return leaseEnded, fmt.Sprintf("lease %s holds member %s, not this one", l.Name, l.Status.InstanceRef.Name)
	}
	switch l.Status.Phase {
	case kobev1.LeaseReleased, kobev1.LeaseExpired, kobev1.LeaseRecycling, kobev1.LeaseQuarantined:
		return leaseEnded, fmt.Sprintf("lease %s is %s", l.Name, l.Status.Phase)
	}
	return leaseActive, fmt.Sprintf("bound to lease %s", l.Name)
}

// leasedPhaseDelay is how long a bind must last before the member's status
// says Leased. Everything that acts on a bind reads spec.leaseRef, written
// by the bind itself; the phase is for people (kubectl get), who see it one
// to two seconds late (boundAt is kept to the second). A lease released
// within it (a CI step that fails at once; make bench's cycles) takes its
// member from Ready to its deletion with no status write between.
const leasedPhaseDelay = time.Second

// leasedWriteWait is how long the Leased status of inst, bound and its lease
// active, still waits at now: 0 once leasedPhaseDelay has surely passed
// since the bind, when the phase is written already, or for a bind that does
// not say when it was made.
func leasedWriteWait(inst *kobev1.ClusterInstance, now time.Time) time.Duration {
	ref := inst.Spec.LeaseRef
	if inst.Status.Phase == kobev1.InstanceLeased || ref == nil || ref.BoundAt == nil {
		return 0
	}
	// boundAt is kept to the second (a metav1.Time): the bind came within
	// the second after it. Never longer: another replica's clock may run
	// ahead of this one.
	const upTo = time.Second + leasedPhaseDelay
	return min(max(ref.BoundAt.Add(upTo).Sub(now), 0), upTo)
}

// endedForGood tells whether the lease l, as the cache shows it, ended in a
// way no later state of it can undo: it is the lease inst names (by UID) and
// it is being deleted or its phase is an ended one. A lease never leaves an
// ended phase (every status write is fenced by resourceVersion), so a cache
// that lags only shows it earlier in that end, and a live read would find it
// ended too. Anything else the cache says against the bind (gone, another
// UID, another member) is confirmed live.
func endedForGood(inst *kobev1.ClusterInstance, l *kobev1.ClusterLease) bool {
	ref := inst.Spec.LeaseRef
	if l == nil || ref == nil || ref.UID == "" || l.UID != ref.UID {
		return false
	}
	return !l.DeletionTimestamp.IsZero() || lease.IsEnded(l.Status.Phase)
}
