//go:build heavy

package local

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/leasecreds"
	"github.com/kunobi-ninja/kobe/internal/gates"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// BenchmarkMeasureFrozen measures what a Ready member (the default pool
// template: no nodes) costs while it idles running and while it is frozen
// with the cgroup v2 freezer, with 1..N such members side by side, and how
// long a frozen member takes to answer again once thawed. Root only (it
// creates cgroups in the unified hierarchy):
//
//	go test -tags heavy ./internal/backend/local/ -run '^$' -bench BenchmarkMeasureFrozen -benchtime 1x -count=1 -v -timeout 60m
//
// Members' control-plane processes do not live in a cgroup of their own
// (each runs in its own process group), so the benchmark moves each
// member's processes into a cgroup it creates for it under the unified
// hierarchy (kobe-measure-<random>/<uid>), freezes and thaws it by writing
// cgroup.freeze, and removes it at the end. CPU is the cgroup's
// cpu.stat usage_usec over the window (every thread of every process of
// the member, one core = 100%); memory is VmRSS and RssAnon of the
// member's processes (/proc/<pid>/status).
//
// For n = 1..KOBE_MEASURE_MEMBERS (default 4): create member n, let it
// idle 10 s, measure every member over KOBE_MEASURE_WINDOW (default 60s)
// running, freeze them all, measure the same window frozen, thaw them all
// and time, per member, the thaw (cgroup.events says "frozen 0") and the
// first "ok" of /readyz; then check each member as the operator does after
// a thaw (Observe says Ready without a failing probe, the pool's default
// gates pass) and that a lease's kubeconfig works (kubectl get ns). Then
// KOBE_MEASURE_THAWS (default 10) more freeze/thaw cycles of member 1,
// frozen KOBE_MEASURE_HOLD (default 5s) each.
func BenchmarkMeasureFrozen(bench *testing.B) {
	var t testing.TB = bench
	if os.Geteuid() != 0 {
		t.Fatal("BenchmarkMeasureFrozen needs root: it creates cgroups")
	}
	maxN := envInt(t, "KOBE_MEASURE_MEMBERS", 4)
	thaws := envInt(t, "KOBE_MEASURE_THAWS", 10)
	window := envDuration(t, "KOBE_MEASURE_WINDOW", time.Minute)
	hold := envDuration(t, "KOBE_MEASURE_HOLD", 5*time.Second)
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl is needed to check the lease kubeconfig after a thaw")
	}
	unified := unifiedMount(t)
	root := filepath.Join(unified, "kobe-measure-"+string(uuid.NewUUID())[:8])
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t) // its cleanup runs after removeMeasureCgroups: registered first
	t.Cleanup(func() { removeMeasureCgroups(t, unified, root) })

	var report strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&report, "load average at start: %s\n", strings.TrimSpace(string(load)))
	fmt.Fprintf(&report, "| members | CPU running, all members (one core = 100%%) | per member | CPU frozen, all members | VmRSS / RssAnon per member running (MiB) | VmRSS / RssAnon per member frozen (MiB) | thaw (max) | thaw to /readyz ok (max) | after thaw: Observe, gates, kubectl get ns with a lease kubeconfig |\n|---|---|---|---|---|---|---|---|---|\n")
	var members []frozenMember
	for n := 1; n <= maxN; n++ {
		m := newMember(fmt.Sprintf("frozen-%d", n))
		if err := b.Create(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		obs, err := waitForState(t, b, m, backend.StateReady, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		fm := frozenMember{m: m, cg: filepath.Join(root, string(m.UID)), access: obs.Access}
		if err := os.Mkdir(fm.cg, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, pr := range memberProcs(t, b, m) {
			if err := os.WriteFile(filepath.Join(fm.cg, "cgroup.procs"), []byte(strconv.Itoa(pr.pid)), 0o644); err != nil {
				t.Fatalf("moving %s (pid %d) into %s: %v", pr.name, pr.pid, fm.cg, err)
			}
		}
		members = append(members, fm)
		time.Sleep(10 * time.Second) // the new member's start-up settles: idle is what is measured

		running := measureMembers(t, b, members, window)
		for _, fm := range members {
			setFrozen(t, fm.cg, true)
		}
		frozen := measureMembers(t, b, members, window)
		var thawMax, readyMax time.Duration
		var checks []string
		for _, fm := range members {
			th, rd := thawAndWait(t, fm)
			thawMax, readyMax = max(thawMax, th), max(readyMax, rd)
		}
		for _, fm := range members {
			checks = append(checks, checkThawed(t, b, fm))
		}
		perMember := make([]string, len(running.cpu))
		for i, c := range running.cpu {
			perMember[i] = fmt.Sprintf("%.1f%%", c)
		}
		row := fmt.Sprintf("| %d | %.1f%% | %s | %.2f%% | %.0f / %.0f | %.0f / %.0f | %s | %s | %s |\n",
			n, running.total, strings.Join(perMember, ", "), frozen.total,
			running.rss/float64(n), running.anon/float64(n), frozen.rss/float64(n), frozen.anon/float64(n),
			thawMax.Round(100*time.Microsecond), readyMax.Round(time.Millisecond), strings.Join(checks, "; "))
		t.Log(row)
		report.WriteString(row)
	}

	// Repeated thaws of one member, as the pool would thaw one ahead of a
	// hand-out.
	fm := members[0]
	var thawTimes, readyTimes []time.Duration
	for range thaws {
		setFrozen(t, fm.cg, true)
		time.Sleep(hold) // a frozen member waits for demand: the hold is the point
		th, rd := thawAndWait(t, fm)
		thawTimes, readyTimes = append(thawTimes, th), append(readyTimes, rd)
	}
	check := checkThawed(t, b, fm)
	slices.Sort(thawTimes)
	slices.Sort(readyTimes)
	fmt.Fprintf(&report, "\n%d thaws of one member (frozen %s each, %d members Ready): thaw p50 %s max %s; thaw to /readyz ok p50 %s max %s; then %s\n",
		thaws, hold, len(members),
		thawTimes[len(thawTimes)/2].Round(10*time.Microsecond), thawTimes[len(thawTimes)-1].Round(10*time.Microsecond),
		readyTimes[len(readyTimes)/2].Round(100*time.Microsecond), readyTimes[len(readyTimes)-1].Round(100*time.Microsecond), check)
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&report, "load average at end: %s\n", strings.TrimSpace(string(load)))
	t.Logf("\n%s", report.String())
}

type frozenMember struct {
	m      backend.Member
	cg     string // its cgroup in the unified hierarchy
	access *backend.Access
}

type windowFigures struct {
	cpu       []float64 // per member, percent of one core
	total     float64   // all members, percent of one core
	rss, anon float64   // all members, MiB, at the end of the window
}

// measureMembers waits window and returns the CPU the members' cgroups
// used meanwhile and their memory at its end.
func measureMembers(t testing.TB, b *Backend, members []frozenMember, window time.Duration) windowFigures {
	t.Helper()
	before := make([]float64, len(members))
	for i, fm := range members {
		before[i] = cgroupCPUSeconds(t, fm.cg)
	}
	start := time.Now()
	time.Sleep(window) // measuring idle CPU: waiting is the point
	took := time.Since(start).Seconds()
	var out windowFigures
	for i, fm := range members {
		c := 100 * (cgroupCPUSeconds(t, fm.cg) - before[i]) / took
		out.cpu = append(out.cpu, c)
		out.total += c
		rss, anon, _ := memberRSS(t, b, fm.m)
		out.rss += rss
		out.anon += anon
	}
	return out
}

// cgroupCPUSeconds is the CPU time every task of the cgroup used so far.
func cgroupCPUSeconds(t testing.TB, cg string) float64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cg, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatal(err)
			}
			return us / 1e6
		}
	}
	t.Fatalf("no usage_usec in %s/cpu.stat", cg)
	return 0
}

// setFrozen writes cgroup.freeze and waits until cgroup.events reports the
// state reached; it returns how long that took.
func setFrozen(t testing.TB, cg string, frozen bool) time.Duration {
	t.Helper()
	v, want := "0", "frozen 0"
	if frozen {
		v, want = "1", "frozen 1"
	}
	start := time.Now()
	if err := os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(strings.Split(string(data), "\n"), want) {
			return time.Since(start)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: not %q after 10 s: %s", cg, want, data)
		}
		time.Sleep(100 * time.Microsecond) // cgroup.events has no cheaper wait without inotify
	}
}

// thawAndWait thaws a member and returns how long the thaw took and how
// long from its start until /readyz answered "ok".
func thawAndWait(t testing.TB, fm frozenMember) (thaw, ready time.Duration) {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(fm.access.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 2 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	thaw = setFrozen(t, fm.cg, false)
	for {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cfg.Host+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			var body [8]byte
			n, _ := resp.Body.Read(body[:])
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body[:n]) == "ok" {
				return thaw, time.Since(start)
			}
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("member %s: /readyz not ok a minute after its thaw: %v", fm.m.Name, err)
		}
		time.Sleep(5 * time.Millisecond) // polling for the first answer
	}
}

// checkThawed checks a thawed member as the operator would before handing
// it out, and that a lease kubeconfig minted for it works with kubectl.
func checkThawed(t testing.TB, b *Backend, fm frozenMember) string {
	t.Helper()
	obs, err := b.Observe(t.Context(), fm.m)
	if err != nil || obs.State != backend.StateReady || obs.Message != "" {
		return fmt.Sprintf("%s: Observe %s %q %v", fm.m.Name, obs.State, obs.Message, err)
	}
	rs := gates.EvaluateMember(t.Context(), obs.Access.AdminKubeconfig, pool.MemberGates(0, nil), nil, gates.Options{Timeout: 5 * time.Second})
	if !gates.AllPassed(rs) {
		return fmt.Sprintf("%s: gates %v", fm.m.Name, rs)
	}
	exp := metav1.NewTime(time.Now().Add(10 * time.Minute).Truncate(time.Second))
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "lease-" + string(fm.m.UID)[:12], UID: uuid.NewUUID()}}
	l.Spec.Requester.Identity = "measure"
	l.Status.ExpiresAt = &exp
	l.Status.InstanceRef = &kobev1.ObjectRef{Name: fm.m.Name, UID: fm.m.UID}
	bound := metav1.Now()
	inst := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: fm.m.Name, UID: fm.m.UID},
		Spec: kobev1.ClusterInstanceSpec{LeaseRef: &kobev1.LeaseBinding{Name: l.Name, UID: l.UID, BoundAt: &bound}}}
	kc, err := leasecreds.Kubeconfig(obs.Access, l, inst, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lease.kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "kubectl", "--kubeconfig", path, "--request-timeout", "10s", "get", "ns", "-o", "name").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "namespace/default") {
		return fmt.Sprintf("%s: kubectl get ns: %v %s", fm.m.Name, err, out)
	}
	return "ok"
}

// unifiedMount is where the cgroup v2 hierarchy is mounted.
func unifiedMount(t testing.TB) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if pf, qf := strings.Fields(pre), strings.Fields(post); ok && len(pf) >= 5 && len(qf) >= 1 && qf[0] == "cgroup2" && pf[3] == "/" {
			return pf[4]
		}
	}
	t.Fatal("no cgroup2 hierarchy is mounted")
	return ""
}

// removeMeasureCgroups thaws every member's cgroup, moves what still runs
// in it back to the hierarchy's root, and removes the cgroups.
func removeMeasureCgroups(t testing.TB, unified, root string) {
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Error(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		cg := filepath.Join(root, e.Name())
		_ = os.WriteFile(filepath.Join(cg, "cgroup.freeze"), []byte("0"), 0o644)
		data, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		for _, pid := range strings.Fields(string(data)) {
			_ = os.WriteFile(filepath.Join(unified, "cgroup.procs"), []byte(pid), 0o644)
		}
		if err := os.Remove(cg); err != nil {
			t.Errorf("removing %s: %v", cg, err)
		}
	}
	if err := os.Remove(root); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removing %s: %v", root, err)
	}
}

func envInt(t testing.TB, key string, def int) int {
	t.Helper()
	n, err := strconv.Atoi(envOr(key, strconv.Itoa(def)))
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return n
}

func envDuration(t testing.TB, key string, def time.Duration) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(envOr(key, def.String()))
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return d
}
