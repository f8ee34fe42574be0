//go:build root

package localnodes

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/test/hostile"
)

// The direct pool's member limits: room for its control plane, node and
// workload (about 0.8 GiB and 500 tasks at rest), far below the machine's.
const (
	directMemory    = "1536Mi"
	directProcesses = 2048
	directDiskMiB   = 3072
)

// noisyNeighbour checks that the kernel holds the direct member to its
// pool's limits (its cgroup says them, its control plane runs inside),
// then runs the hostile suite's noisy neighbour against it, the proxied
// member being the neighbour.
func noisyNeighbour(t *testing.T, holder, neighbour *workload) {
	if got := holder.member.Spec.Cluster.Limits; got == nil || got.Memory.String() != directMemory || *got.Processes != directProcesses {
		t.Fatalf("the member's spec.cluster.limits are %+v, want the pool's", got)
	}
	uid := string(holder.member.UID)
	want := map[string]string{
		"/sys/fs/cgroup/pids/" + local.NodeCgroup(uid) + "/pids.max":                strconv.Itoa(directProcesses),
		"/sys/fs/cgroup/memory/" + local.NodeCgroup(uid) + "/memory.limit_in_bytes": strconv.FormatInt(memoryBytes(directMemory), 10),
	}
	for f, v := range want {
		got, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(got)) != v {
			t.Errorf("%s: %q (%v), want %s", f, got, err, v)
		}
	}
	// Its data directory is a file system of the pool's disk limit.
	var fsStat syscall.Statfs_t
	if err := syscall.Statfs(memberDir(t, holder.member), &fsStat); err != nil {
		t.Error(err)
	} else if size := int64(fsStat.Blocks) * fsStat.Bsize; size > directDiskMiB<<20 || size < directDiskMiB<<20*9/10 {
		t.Errorf("the member's data directory is on a file system of %d MiB, want the pool's %d MiB", size>>20, directDiskMiB)
	}
	// Every process of the member is in its cgroup: its control plane too.
	procs, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", local.NodeCgroup(uid), "cp", "cgroup.procs"))
	if err != nil || len(strings.Fields(string(procs))) < 4 {
		t.Errorf("the member's control plane is not in its cgroup: %q (%v)", procs, err)
	}
	hostile.NoisyNeighbour(t,
		hostile.Target{Kubeconfig: holder.kubeconfig, Image: testappImage, RunningPod: "client"},
		hostile.Target{Kubeconfig: neighbour.kubeconfig, Image: testappImage, RunningPod: "client"},
		hostile.Appetite{Processes: directProcesses, DiskMiB: directDiskMiB})
}

func memoryBytes(s string) int64 {
	q := resource.MustParse(s)
	return q.Value()
}
