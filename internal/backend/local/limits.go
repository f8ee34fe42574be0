package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// Limits (issue 42): a member's spec.cluster.limits are enforced by the
// kernel on the member's cgroup, NodeCgroup(uid), made before any of its
// processes starts. Its control plane runs in cpCgroup(uid) and each node
// in nodeCgroup(uid, i), both below it, so memory.limit_in_bytes (or
// memory.max) and pids.max bound the member as a whole: a holder who forks
// or allocates without end fails inside the member, and the kernel's OOM
// killer picks one of its processes, never a neighbour's or the
// operator's. Per pod, the nodes' kubelets apply podPidsLimit.

var _ backend.LimitEnforcer = (*Backend)(nil)

// EnforcesLimits: only an operator running as root on a host whose cgroup
// hierarchies have the memory and pids controllers can bound its members.
// Probed once, by limiting and removing an empty cgroup.
func (b *Backend) EnforcesLimits() (bool, string) {
	c := &b.canLimit
	c.once.Do(func() { c.ok, c.why = probeLimits() })
	return c.ok, c.why
}

func probeLimits() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "the operator is not root (cgroups need it)"
	}
	for _, tool := range []struct{ name, why string }{
		{"nft", "the control-plane fence needs nftables"},
		{"mkfs.ext4", "a member's file system needs e2fsprogs"},
		{"mount", "a member's file system is loop-mounted"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return false, tool.name + " is not installed (" + tool.why + ")"
		}
	}
	probe := "kobe/limit-probe-" + strconv.Itoa(os.Getpid())
	if err := node.CreateCgroup(probe); err != nil {
		return false, fmt.Sprintf("cannot make a cgroup: %v", err)
	}
	err := node.LimitCgroup(probe, node.CgroupLimits{MemoryBytes: 1 << 30, Pids: 1024})
	_ = node.RemoveCgroup(probe)
	_ = node.RemoveEmptyCgroup("kobe")
	if err != nil {
		return false, err.Error()
	}
	return true, ""
}

// memberCgroupLimits are the kernel limits of member m's cgroup; ok is
// false when its spec sets none that a cgroup enforces.
func memberCgroupLimits(m backend.Member) (l node.CgroupLimits, ok bool) {
	lim := m.Spec.Cluster.Limits
	if lim == nil {
		return l, false
	}
	if lim.Memory != nil {
		l.MemoryBytes = lim.Memory.Value()
	}
	if lim.Processes != nil {
		l.Pids = *lim.Processes
	}
	return l, l.MemoryBytes > 0 || l.Pids > 0
}

// nodeShare is what each node of a member with limits l may take: all but
// a reserve that only the member's control plane can use (a quarter, at
// most 512 tasks and 512 MiB). A pod that forks or allocates without end
// then meets its node's limit first, so the kernel's refusal or OOM kill
// lands on the holder's own processes and not on etcd or kube-apiserver,
// whose loss would fail the whole member.
func nodeShare(l node.CgroupLimits) node.CgroupLimits {
	if l.Pids > 0 {
		l.Pids -= min(512, l.Pids/4)
	}
	if l.MemoryBytes > 0 {
		l.MemoryBytes -= min(512<<20, l.MemoryBytes/4)
	}
	return l
}

// limitNode makes node i's cgroup, below the member's, with nodeShare of
// member m's limits, before its agent starts in it, and gives the agent
// what its pods may take (node.PodsShare of that).
func limitNode(m backend.Member, i int, cfg *node.Config) error {
	l, ok := memberCgroupLimits(m)
	if !ok {
		return nil
	}
	cg := nodeCgroup(string(m.UID), i)
	if err := node.CreateCgroup(cg); err != nil {
		return fmt.Errorf("making node %d's cgroup: %w", i, err)
	}
	share := nodeShare(l)
	if err := node.LimitCgroup(cg, share); err != nil {
		return fmt.Errorf("limiting node %d's cgroup: %w", i, err)
	}
	pods := node.PodsShare(share)
	cfg.PodsPidsMax, cfg.PodsMemoryMax = pods.Pids, pods.MemoryBytes
	return nil
}

// diskLimit is member m's cluster.limits.disk in bytes (0: none set).
func diskLimit(m backend.Member) int64 {
	if lim := m.Spec.Cluster.Limits; lim != nil && lim.Disk != nil {
		return lim.Disk.Value()
	}
	return 0
}

// podPidsLimit is the nodes' kubelet podPidsLimit of member m (0: none).
func podPidsLimit(m backend.Member) int64 {
	if lim := m.Spec.Cluster.Limits; lim != nil && lim.PodProcesses != nil {
		return *lim.PodProcesses
	}
	return 0
}

// confine makes member m's cgroup with its limits, before any of its
// processes starts; it reports whether the member's processes must join
// it, and its control plane be fenced (node.FenceControlPlane, loaded by
// launchCore once the API server's port is known). Every member is
// confined where this host can (EnforcesLimits), whether or not it has
// limits: the fence is not a limit a pool may leave out. Elsewhere the
// member is built unbounded, as its pool's MemberLimits condition says.
func (b *Backend) confine(m backend.Member) (bool, error) {
	if ok, _ := b.EnforcesLimits(); !ok {
		return false, nil
	}
	uid := string(m.UID)
	if err := node.CreateCgroup(cpCgroup(uid)); err != nil {
		return false, fmt.Errorf("making the member's cgroup: %w", err)
	}
	if l, ok := memberCgroupLimits(m); ok {
		if err := node.LimitCgroup(NodeCgroup(uid), l); err != nil {
			return false, fmt.Errorf("limiting the member's cgroup: %w", err)
		}
	}
	return true, nil
}

// fenceControlPlane loads the fence of a confined member's control plane
// for its API server's port (again at each new port), before its
// processes start.
func (b *Backend) fenceControlPlane(st *state, port int) error {
	bridge := ""
	if st.Nodes > 0 {
		mn, err := memberNet(st)
		if err != nil {
			return err
		}
		bridge = mn.Bridge
	}
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := node.FenceControlPlane(ctx, string(st.UID), cpCgroup(string(st.UID)), port, bridge); err != nil {
		return fmt.Errorf("fencing the member's control plane: %w", err)
	}
	return nil
}

// fences reports whether this backend fences members, so that their
// teardown removes the fence (a host without nft has none to remove).
func (b *Backend) fences() bool {
	ok, _ := b.EnforcesLimits()
	return ok
}
