package kubernetes

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// Limits (issue 42): a kubernetes member's spec.cluster.limits bound its
// nodes, which run the holder's pods, shared evenly between its node pods:
// each gets at most its share of memory and of disk as its container's
// limits (the host's kubelet enforces them: the kernel's OOM killer in the
// pod's memory cgroup, eviction past ephemeral storage), at most its share
// of processes as pids.max of the cgroup kobe-node runs kubelet's pods in,
// and podProcesses as its kubelet's podPidsLimit. A pool's own
// backend.kubernetes.resources.node may ask for less, never for more. The
// control plane's pods keep their own limits (DefaultResources): no
// workload of the holder runs there. New tells the in-cluster machinery
// that this template enforces limits (incluster.Options.EnforcesLimits).

// nodeShare is what one node pod of a member may take; zero fields bound
// nothing.
type nodeShare struct {
	memory, disk            *resource.Quantity
	processes, podProcesses int64
}

// memberShare divides member m's limits between its n node pods.
func memberShare(m backend.Member, n int) nodeShare {
	var s nodeShare
	lim := m.Spec.Cluster.Limits
	if lim == nil || n <= 0 {
		return s
	}
	div := func(q *resource.Quantity) *resource.Quantity {
		if q == nil || q.IsZero() {
			return nil
		}
		return resource.NewQuantity(q.Value()/int64(n), resource.BinarySI)
	}
	s.memory, s.disk = div(lim.Memory), div(lim.Disk)
	if lim.Processes != nil {
		s.processes = *lim.Processes / int64(n)
	}
	if lim.PodProcesses != nil {
		s.podProcesses = *lim.PodProcesses
	}
	return s
}

// cgroupLimits are the share's memory and processes as cgroup limits.
func (s nodeShare) cgroupLimits() node.CgroupLimits {
	l := node.CgroupLimits{Pids: s.processes}
	if s.memory != nil {
		l.MemoryBytes = s.memory.Value()
	}
	return l
}

// cap lowers a node pod's memory and ephemeral-storage limits (and
// requests above them) to the share.
func (s nodeShare) cap(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	for name, q := range map[corev1.ResourceName]*resource.Quantity{corev1.ResourceMemory: s.memory, corev1.ResourceEphemeralStorage: s.disk} {
		if q == nil {
			continue
		}
		if cur, ok := r.Limits[name]; !ok || cur.Cmp(*q) > 0 {
			r.Limits[name] = q.DeepCopy()
		}
		if req, ok := r.Requests[name]; ok && req.Cmp(r.Limits[name]) > 0 {
			r.Requests[name] = r.Limits[name].DeepCopy()
		}
	}
	return r
}
