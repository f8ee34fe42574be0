//go:build root

package localnodes

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/internal/testenv"
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
		// Its node (where the holder's pods run) gets all but the control
		// plane's reserve, a quarter here.
		"/sys/fs/cgroup/pids/" + local.NodeCgroup(uid) + "/n0/pids.max":                strconv.Itoa(directProcesses * 3 / 4),
		"/sys/fs/cgroup/memory/" + local.NodeCgroup(uid) + "/n0/memory.limit_in_bytes": strconv.FormatInt(memoryBytes(directMemory)*3/4, 10),
		// And its pods all but its daemons' reserve (256 tasks, 256 MiB).
		"/sys/fs/cgroup/pids/" + local.NodeCgroup(uid) + "/n0/pods/pids.max":                strconv.Itoa(directProcesses*3/4 - 256),
		"/sys/fs/cgroup/memory/" + local.NodeCgroup(uid) + "/n0/pods/memory.limit_in_bytes": strconv.FormatInt(memoryBytes(directMemory)*3/4-256<<20, 10),
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
	// The member handed out during the attack is kept until they end, so
	// that the replacement its pool builds does not weigh on their
	// measurements.
	var release func(*testing.T)
	defer func() {
		if release != nil {
			release(t)
		}
	}()
	hostile.NoisyNeighbour(t,
		hostile.Target{Kubeconfig: holder.kubeconfig, Image: testappImage, RunningPod: "client"},
		hostile.Target{Kubeconfig: neighbour.kubeconfig, Image: testappImage, RunningPod: "client"},
		hostile.Appetite{Processes: directProcesses, DiskMiB: directDiskMiB, HandOut: func(ht *testing.T) {
			_, release = lease(ht, proxyPool)
		}})
}

// lease leases a member of pool (waiting for one up to memberDeadline) and
// lists its nodes with the lease's kubeconfig; release releases it,
// failing the test it is given on error.
func lease(t *testing.T, pool string) (kubeconfig string, release func(t *testing.T)) {
	kubeconfig = filepath.Join(t.TempDir(), pool+".kubeconfig")
	began := time.Now()
	out, errOut, err := s.Kobe(t, memberDeadline, "lease", pool, "--ttl", "10m", "--kubeconfig", kubeconfig, "-o", "json")
	if err != nil {
		t.Fatalf("kobe lease %s: %v\n%s%s", pool, err, out, errOut)
	}
	var l struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || l.ID == "" {
		t.Fatalf("decoding kobe lease -o json %q: %v", out, err)
	}
	release = func(rt *testing.T) {
		if out, errOut, err := s.Kobe(rt, time.Minute, "release", l.ID); err != nil {
			rt.Errorf("kobe release %s: %v\n%s%s", l.ID, err, out, errOut)
		}
	}
	if nodes, err := testenv.KubectlStdout(t, kubeconfig, "get", "nodes", "-o", "name"); err != nil || !strings.Contains(nodes, "node/") {
		release(t)
		t.Fatalf("a member of %s handed out: kubectl get nodes: %q, %v", pool, nodes, err)
	}
	t.Logf("a member of %s handed out and used %v after asking", pool, time.Since(began).Round(time.Millisecond))
	return kubeconfig, release
}

func memoryBytes(s string) int64 {
	q := resource.MustParse(s)
	return q.Value()
}
