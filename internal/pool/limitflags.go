package pool

import (
	"flag"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Default member limits: a 2-core, 24 GiB host with 16 warm members, each
// with a node running a CI job's pods. Memory: a member with one node and a
// few pods uses about 0.6-1 GiB (kube-apiserver 300-500 MiB, etcd, the
// node's kubelet, containerd and kube-proxy); 2 GiB leaves a test workload
// room while one member at its limit takes at most a twelfth of the host.
// Processes count threads: such a member runs about 400-600 at rest.
var (
	DefaultMemberMemory       = resource.MustParse("2Gi")
	DefaultMemberMaxMemory    = resource.MustParse("8Gi")
	DefaultMemberProcesses    = int64(4096)
	DefaultMemberMaxProcesses = int64(16384)
	DefaultPodProcesses       = int64(1024)
	DefaultMaxPodProcesses    = int64(4096)
	DefaultMemberDisk         = resource.MustParse("20Gi")
	DefaultMemberMaxDisk      = resource.MustParse("100Gi")
)

// LimitFlags are the operator's flags of member limits.
type LimitFlags struct {
	memory, maxMemory, disk, maxDisk                  resource.QuantityValue
	processes, maxProcesses, podProcesses, maxPodProc int64
}

// Bind registers the flags on fs with their defaults.
func (f *LimitFlags) Bind(fs *flag.FlagSet) {
	f.memory = resource.QuantityValue{Quantity: DefaultMemberMemory.DeepCopy()}
	f.maxMemory = resource.QuantityValue{Quantity: DefaultMemberMaxMemory.DeepCopy()}
	f.disk = resource.QuantityValue{Quantity: DefaultMemberDisk.DeepCopy()}
	f.maxDisk = resource.QuantityValue{Quantity: DefaultMemberMaxDisk.DeepCopy()}
	fs.Var(&f.memory, "member-memory", "Memory a member may use in all (control plane, nodes and their pods), enforced by the kernel, when its pool's cluster.limits.memory is unset; 0: none unless the pool asks.")
	fs.Var(&f.maxMemory, "member-max-memory", "The most memory any member gets, whatever its pool asks; 0: no ceiling.")
	fs.Int64Var(&f.processes, "member-processes", DefaultMemberProcesses, "Processes and threads a member may run at once in all (pids.max of its cgroup) when its pool's cluster.limits.processes is unset; 0: none unless the pool asks.")
	fs.Int64Var(&f.maxProcesses, "member-max-processes", DefaultMemberMaxProcesses, "The most processes and threads any member gets, whatever its pool asks; 0: no ceiling.")
	fs.Int64Var(&f.podProcesses, "member-pod-processes", DefaultPodProcesses, "Processes and threads one pod of a member may run at once (its kubelets' podPidsLimit) when its pool's cluster.limits.podProcesses is unset; 0: none unless the pool asks.")
	fs.Int64Var(&f.maxPodProc, "member-max-pod-processes", DefaultMaxPodProcesses, "The most processes and threads one pod of any member gets, whatever its pool asks; 0: no ceiling.")
	fs.Var(&f.disk, "member-disk", "Disk a member's data may take when its pool's cluster.limits.disk is unset; 0: none unless the pool asks.")
	fs.Var(&f.maxDisk, "member-max-disk", "The most disk any member gets, whatever its pool asks; 0: no ceiling.")
}

// Validate refuses negative limits and a default above its ceiling.
func (f *LimitFlags) Validate() error {
	for _, c := range []struct {
		flag, ceilFlag string
		v, ceil        int64
		text, ceilText string
	}{
		{"--member-memory", "--member-max-memory", f.memory.Value(), f.maxMemory.Value(), f.memory.String(), f.maxMemory.String()},
		{"--member-processes", "--member-max-processes", f.processes, f.maxProcesses, strconv.FormatInt(f.processes, 10), strconv.FormatInt(f.maxProcesses, 10)},
		{"--member-pod-processes", "--member-max-pod-processes", f.podProcesses, f.maxPodProc, strconv.FormatInt(f.podProcesses, 10), strconv.FormatInt(f.maxPodProc, 10)},
		{"--member-disk", "--member-max-disk", f.disk.Value(), f.maxDisk.Value(), f.disk.String(), f.maxDisk.String()},
	} {
		if c.v < 0 || c.ceil < 0 {
			return fmt.Errorf("%s and %s must not be negative", c.flag, c.ceilFlag)
		}
		if c.ceil > 0 && c.v > c.ceil {
			return fmt.Errorf("%s %s is above %s %s: raise the ceiling or lower the default", c.flag, c.text, c.ceilFlag, c.ceilText)
		}
	}
	return nil
}

// Policy is what the flags say.
func (f *LimitFlags) Policy() LimitPolicy {
	q := func(v resource.QuantityValue) *resource.Quantity {
		if v.IsZero() {
			return nil
		}
		c := v.Quantity.DeepCopy()
		return &c
	}
	n := func(v int64) *int64 {
		if v == 0 {
			return nil
		}
		return &v
	}
	return LimitPolicy{
		Default: kobev1.MemberLimits{Memory: q(f.memory), Processes: n(f.processes), PodProcesses: n(f.podProcesses), Disk: q(f.disk)},
		Ceiling: kobev1.MemberLimits{Memory: q(f.maxMemory), Processes: n(f.maxProcesses), PodProcesses: n(f.maxPodProc), Disk: q(f.maxDisk)},
	}
}
