//go:build heavy

package local

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/gates"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// BenchmarkMeasureMember measures a member's time from Create to Ready and
// the resident memory of its processes, at Ready and after it has idled. It
// is a measurement, not a correctness test, so it is a benchmark and runs
// only on request:
//
//	go test ./internal/backend/local/ -run '^$' -bench BenchmarkMeasureMember -benchtime 1x -count=1 -v
//
// KOBE_MEASURE_VARIANTS=baseline,default (default "default") compares an
// empty tuning with defaultTuning (a "+scheduling" suffix measures members
// with kube-scheduler and kwok, "+nodes" members with one real node: root,
// make node image-pause node-deps; every process of the node's cgroup is
// counted, containerd, kubelet, kube-proxy and the pause pods' shims
// included); KOBE_MEASURE_REPEAT sets the repetitions (default 3).
func BenchmarkMeasureMember(bench *testing.B) {
	var t testing.TB = bench
	variants := map[string]tuning{"baseline": {}, "default": defaultTuning()}
	for name, tn := range measureVariants() {
		variants[name] = tn
	}
	names := strings.Split(envOr("KOBE_MEASURE_VARIANTS", "default"), ",")
	repeat, err := strconv.Atoi(envOr("KOBE_MEASURE_REPEAT", "3"))
	if err != nil {
		t.Fatal(err)
	}
	// KOBE_MEASURE_SETTLE: how long a member idles before its idle memory
	// and CPU are read (20s; a longer one shows what the Go runtimes give
	// back once the start-up's garbage is collected).
	settle, err := time.ParseDuration(envOr("KOBE_MEASURE_SETTLE", "20s"))
	if err != nil {
		t.Fatal(err)
	}
	var report strings.Builder
	var load []byte
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&report, "load average at start: %s\n", strings.TrimSpace(string(load)))
	fmt.Fprintf(&report, "| variant | run | Create->Ready | Create->gates passed | VmRSS / RssAnon at Ready (MiB) | VmRSS / RssAnon after %s idle (MiB) | CPU while idle (one core = 100%%) | per process after idle, VmRSS/RssAnon (MiB) |\n|---|---|---|---|---|---|---|---|\n", settle)
	for _, name := range names {
		base, withScheduling := strings.CutSuffix(name, "+scheduling")
		base, withNodes := strings.CutSuffix(base, "+nodes")
		tn, ok := variants[base]
		if !ok {
			t.Fatalf("unknown variant %q", name)
		}
		for run := 1; run <= repeat; run++ {
			var b *Backend
			if withNodes {
				b = newBackend(t, nodeOptions(t))
			} else {
				b = newBackend(t)
			}
			b.tuning = tn
			m := newMember(fmt.Sprintf("measure-%s-%d", base, run))
			if withScheduling {
				m.Spec.Backend.Local = &kobev1.LocalBackendSpec{Scheduling: true}
			}
			if withNodes {
				m.Spec.Backend.Local = &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}
			}
			start := time.Now()
			if err := b.Create(t.Context(), m); err != nil {
				t.Fatal(err)
			}
			if _, err := waitForState(t, b, m, backend.StateReady, 3*time.Minute); err != nil {
				row := fmt.Sprintf("| %s | %d | not ready: %v | | | | | |\n", name, run, err)
				t.Log(row)
				report.WriteString(row)
				continue
			}
			took := time.Since(start)
			// With nodes, the operator hands a member out once its gates
			// pass too: a pod ran on the node, CoreDNS answered a pod (and
			// the node's volume provisioner got its StorageClass).
			gatesTook := "-"
			if withNodes {
				d, err := passMemberGates(t, b, m)
				if err != nil {
					t.Fatal(err)
				}
				gatesTook = fmt.Sprintf("%.1f s", (took + d).Seconds())
			}
			atReady, anonAtReady, _ := memberRSS(t, b, m)
			cpuBefore := memberCPU(t, b, m)
			time.Sleep(settle) // measuring idle memory and CPU: waiting is the point
			idle, anonIdle, per := memberRSS(t, b, m)
			idleCPU := memberCPU(t, b, m) - cpuBefore
			row := fmt.Sprintf("| %s | %d | %.1f s | %s | %.0f / %.0f | %.0f / %.0f | %.1f%% | %s |\n",
				name, run, took.Seconds(), gatesTook, atReady, anonAtReady, idle, anonIdle, 100*idleCPU/settle.Seconds(), per)
			t.Log(row)
			report.WriteString(row)
			if gone, err := b.Delete(t.Context(), m); err != nil || !gone {
				t.Fatalf("Delete = %v, %v", gone, err)
			}
		}
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&report, "load average at end: %s\n", strings.TrimSpace(string(load)))
	t.Logf("\n%s", report.String())
}

// passMemberGates evaluates the gates a pool gives a member with nodes
// (pool.MemberGates), as the operator does every half second, until all
// pass, and returns how long that took.
func passMemberGates(t testing.TB, b *Backend, m backend.Member) (time.Duration, error) {
	obs, err := b.Observe(t.Context(), m)
	if err != nil {
		return 0, err
	}
	gs := pool.MemberGates(pool.RealNodes(kobev1.BackendSpec{Type: kobev1.BackendLocal, Local: m.Spec.Backend.Local}), nil)
	if !kobev1.HasGate(gs, kobev1.GateDNSHealthy) {
		return 0, fmt.Errorf("gates %v: want those of a member with nodes", kobev1.GateKeys(gs))
	}
	start := time.Now()
	last := ""
	for time.Since(start) < 3*time.Minute {
		rs := gates.EvaluateMember(t.Context(), obs.Access.AdminKubeconfig, gs, nil, gates.Options{Timeout: 5 * time.Second, Nodes: 1})
		if gates.AllPassed(rs) {
			return time.Since(start), nil
		}
		var pending []string
		for _, r := range rs {
			if !r.Passed {
				pending = append(pending, r.Name+": "+r.Message)
			}
		}
		if msg := strings.Join(pending, "; "); msg != last {
			t.Logf("%6.1f s: %s", time.Since(start).Seconds(), msg)
			last = msg
		}
		time.Sleep(500 * time.Millisecond) // the operator's poll of a Creating member
	}
	return 0, fmt.Errorf("the member's gates did not pass within 3 minutes")
}

// measureVariants are tunings compared with defaultTuning: each changes one
// thing.
func measureVariants() map[string]tuning {
	with := func(change func(args, env map[string][]string)) tuning {
		tn := defaultTuning()
		args, env := map[string][]string{}, map[string][]string{}
		for c, a := range tn.args {
			args[c] = slices.Clone(a)
		}
		for c, e := range tn.env {
			env[c] = slices.Clone(e)
		}
		change(args, env)
		return tuning{args: args, env: env}
	}
	gogc := func(v string) func(args, env map[string][]string) {
		return func(_, env map[string][]string) {
			for c := range env {
				env[c] = []string{"GOGC=" + v}
			}
		}
	}
	return map[string]tuning{
		"gogc100": with(gogc("100")),
		"gogc30":  with(gogc("30")),
		"nowatchcache": with(func(args, _ map[string][]string) {
			args[compAPIServer] = append(args[compAPIServer], "--watch-cache=false")
		}),
		"apigogc40": with(func(_, env map[string][]string) {
			env[compAPIServer] = []string{"GOGC=40"}
		}),
		"gogc40": with(gogc("40")),
		"noapf": with(func(args, _ map[string][]string) {
			args[compAPIServer] = append(args[compAPIServer], "--enable-priority-and-fairness=false")
		}),
	}
}

// memberRSS sums VmRSS of the member's processes, in MiB, and describes
// each process as "component VmRSS/RssAnon". RssAnon is what a member adds:
// the rest is mostly the binaries' code, shared by every member.
func memberRSS(t testing.TB, b *Backend, m backend.Member) (rss, anon float64, per string) {
	t.Helper()
	var parts []string
	for _, pr := range memberProcs(t, b, m) {
		r, err := procStatusKiB(pr.pid, "VmRSS")
		if err != nil {
			t.Fatalf("RSS of %s: %v", pr.name, err)
		}
		a, err := procStatusKiB(pr.pid, "RssAnon")
		if err != nil {
			t.Fatalf("RSS of %s: %v", pr.name, err)
		}
		rss += float64(r) / 1024
		anon += float64(a) / 1024
		parts = append(parts, fmt.Sprintf("%s %.0f/%.0f", pr.name, float64(r)/1024, float64(a)/1024))
	}
	return rss, anon, strings.Join(parts, ", ")
}

type measuredProc struct {
	pid  int
	name string
}

// memberProcs are the member's recorded processes, and every process in
// its nodes' cgroup (containerd, kubelet, kube-proxy, shims, pods).
func memberProcs(t testing.TB, b *Backend, m backend.Member) []measuredProc {
	t.Helper()
	st, err := readState(b.paths(m))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	var out []measuredProc
	for _, pr := range st.Processes {
		seen[pr.PID] = true
		out = append(out, measuredProc{pr.PID, pr.Component})
	}
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", NodeCgroup(string(m.UID))), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil //nolint:nilerr // a cgroup that went away has no process to count
		}
		data, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil || seen[pid] {
				continue
			}
			seen[pid] = true
			comm, _ := os.ReadFile("/proc/" + f + "/comm")
			out = append(out, measuredProc{pid, strings.TrimSpace(string(comm))})
		}
		return nil
	})
	return out
}

// nodeOptions give a backend what members with nodes need: the node
// binaries, a kobe-node built for the benchmark, the pause image.
func nodeOptions(t testing.TB) func(*Options) {
	t.Helper()
	root := testenv.RepoRoot()
	agent := filepath.Join(t.TempDir(), "kobe-node")
	build := exec.CommandContext(context.Background(), "go", "build", "-o", agent, "./cmd/kobe-node")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kobe-node: %v\n%s", err, out)
	}
	return func(o *Options) {
		o.NodeBinDir = filepath.Join(root, DefaultNodeBinDir)
		o.NodeAgent = agent
		o.ImageDir = filepath.Join(root, DefaultImageDir)
	}
}

// memberCPU sums the user and system CPU seconds of the member's processes.
func memberCPU(t testing.TB, b *Backend, m backend.Member) float64 {
	t.Helper()
	var total float64
	for _, pr := range memberProcs(t, b, m) {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pr.pid) + "/stat")
		if err != nil {
			continue // a process that ended (a probe's shim) has no CPU left to count
		}
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		// After the command: state is field 3 of stat, utime 14 and stime 15.
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		total += (utime + stime) / clockTicks
	}
	return total
}

// clockTicks is USER_HZ, 100 on Linux for every architecture Go supports.
const clockTicks = 100

// procStatusKiB reads a "<field>: N kB" line of /proc/<pid>/status.
func procStatusKiB(pid int, field string) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
