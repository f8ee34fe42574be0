//go:build bench

package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// Flags, passed after -args (see the Makefile's bench target).
var (
	flagOnly  = flag.String("bench.only", "", "Comma-separated measurements to run (default all; also $BENCH): "+strings.Join(measurementNames(), ","))
	flagRuns  = flag.Int("bench.runs", 3, "Runs of each repeated measurement; the report gives the median.")
	flagWrite = flag.Bool("bench.write", false, "Write docs/benchmarks.md (the generated section) and docs/benchmarks.json.")
	flagMD    = flag.String("bench.md", "docs/benchmarks.md", "Markdown report, relative to the repository root.")
	flagJSON  = flag.String("bench.json", "docs/benchmarks.json", "JSON report, relative to the repository root.")

	flagHandouts     = flag.Int("bench.handouts", 200, "Hand-outs per concurrency level of the latency measurement (at most 500, a pool's size limit).")
	flagCyclesFor    = flag.Duration("bench.cycles-duration", 60*time.Second, "How long each lease-and-release measurement runs.")
	flagCyclesSweep  = flag.Duration("bench.cycles-sweep", 4*time.Second, "How long each caller count of the sweep runs.")
	flagCallers      = flag.String("bench.cycles-callers", "4,8,16,32", "Caller counts tried by the sweep; the best one runs for -bench.cycles-duration.")
	flagPrewarmMax   = flag.Int("bench.prewarm-max", 3000, "Most members pre-warmed for the pre-warmed cycles measurement.")
	flagScalePools   = flag.Int("bench.scale-pools", 1000, "Pools of the scale measurement.")
	flagScaleSize    = flag.Int("bench.scale-size", 10, "Members per pool of the scale measurement.")
	flagScaleWait    = flag.Duration("bench.scale-wait", 3*time.Minute, "How long the scale measurement waits for every member to be Ready.")
	flagRefillSim    = flag.Int("bench.refill-sim-samples", 10, "Samples of the sim refill measurement.")
	flagRefillLocal  = flag.Int("bench.refill-local-samples", 3, "Samples of the local refill measurement.")
	flagFrozenRounds = flag.Int("bench.frozen-rounds", 3, "Rounds of three hand-outs of the frozen measurement.")
	flagOverloadReqs = flag.Int("bench.overload-requests", 1000, "Concurrent requests of the overload measurement.")
	flagMaxInFlight  = flag.Int("bench.max-in-flight", 50, "--api-max-in-flight of the overload measurement's operator.")
	flagOperator     = flag.String("bench.operator", "", "The kobe-operator binary (default bin/kobe-operator of the repository).")
	flagOperatorArgs = flag.String("bench.operator-args", "", "Space-separated extra kobe-operator flags for every measurement, e.g. \"--kube-api-qps=-1\" (the report names them).")
	flagSim          = flag.Bool("bench.sim", true, "Start the operator with --enable-sim-backend.")
)

// measurement is one function of the bench; repeated ones run -bench.runs
// times and report medians, the others once.
type measurement struct {
	name     string
	repeated bool
	run      func(ctx context.Context, b *bench, run int) (figures, error)
}

func measurements() []measurement {
	return []measurement{
		{"handout", true, measureHandout},
		{"writes", true, measureWrites},
		{"cycles", true, measureCycles},
		{"cycles-warm", false, measureCyclesWarm},
		{"burst", true, measureBurst},
		{"refill", true, measureRefillSim},
		{"overload", true, measureOverload},
		{"refill-local", false, measureRefillLocal},
		{"fill-local", false, measureFillLocal},
		{"scale", false, measureScale},
		{"heartbeat", false, measureHeartbeats},
		{"frozen", false, measureFrozen},
	}
}

func measurementNames() []string {
	return []string{"handout", "writes", "cycles", "cycles-warm", "burst", "refill", "overload", "refill-local", "fill-local", "scale", "heartbeat", "frozen"}
}

// figures are one run's numbers by key, e.g. "handout.c16.p99_ms".
type figures map[string]float64

// bench is the shared fixture: one test control plane.
type bench struct {
	env     *testenv.Env
	cfg     *rest.Config
	work    string
	metrics *apiMetrics
	token   string
	nsSeq   int
	// best is the caller count the first cycles sweep chose; later runs
	// reuse it.
	best int
	// refillRate is the last refilling cycles run's rate.
	refillRate float64
}

// TestBench runs the selected measurements and writes the report. It is
// the benchmark harness, not a test: `make bench` runs it.
func TestBench(t *testing.T) {
	selected, err := selectedMeasurements()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operatorBinary(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ctrllog.SetLogger(logr.Discard())
	env := testenv.Start(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1 // no client-side throttling: the harness must not be the bottleneck
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	env.Client = c
	m, err := newAPIMetrics(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{env: env, cfg: cfg, work: benchWorkDir(t), metrics: m, token: fmt.Sprintf("bench-%d", time.Now().UnixNano())}
	rep := newReport(*flagRuns)
	started := time.Now()
	for run := 1; run <= *flagRuns; run++ {
		for _, ms := range selected {
			if !ms.repeated && run > 1 {
				continue
			}
			t0 := time.Now()
			figs, err := ms.run(ctx, b, run)
			if err != nil {
				t.Fatalf("%s (run %d): %v", ms.name, run, err)
			}
			if len(figs) == 0 {
				t.Fatalf("%s (run %d) measured nothing", ms.name, run)
			}
			rep.add(ms.name, run, figs)
			t.Logf("%s run %d took %s:\n%s", ms.name, run, time.Since(t0).Round(time.Second), figs.text())
			// Written after every measurement, so that an interrupted run
			// leaves what it measured, saying how far it got.
			rep.Progress = fmt.Sprintf("%s of run %d of %d", ms.name, run, *flagRuns)
			writeReport(t, rep, selected, started, false)
		}
	}
	writeReport(t, rep, selected, started, true)
}

// writeReport renders the report and, with -bench.write and every
// measurement selected, writes the files.
func writeReport(t *testing.T, rep *report, selected []measurement, started time.Time, done bool) {
	rep.Elapsed = time.Since(started).Round(time.Second).String()
	rep.Measurements = names(selected)
	rep.Complete = done
	md := rep.markdown()
	if done {
		fmt.Println(md)
	}
	switch {
	case !*flagWrite:
	case len(selected) < len(measurements()):
		if done {
			t.Logf("not writing %s and %s: only %s ran", *flagMD, *flagJSON, strings.Join(rep.Measurements, ","))
		}
	default:
		if err := rep.write(*flagMD, *flagJSON, md); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and %s", *flagMD, *flagJSON)
	}
}

func selectedMeasurements() ([]measurement, error) {
	only := *flagOnly
	if only == "" {
		only = os.Getenv("BENCH")
	}
	all := measurements()
	if only == "" || only == "all" {
		return all, nil
	}
	var out []measurement
	for _, n := range strings.Split(only, ",") {
		i := slices.IndexFunc(all, func(m measurement) bool { return m.name == strings.TrimSpace(n) })
		if i < 0 {
			return nil, fmt.Errorf("unknown measurement %q; known: %s", n, strings.Join(measurementNames(), ","))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func names(ms []measurement) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.name
	}
	return out
}

// namespace creates a fresh namespace with the bench's token Secret and a
// token AccessPolicy granting every pool with no per-owner limit.
func (b *bench) namespace(ctx context.Context, name string) (string, error) {
	b.nsSeq++
	ns := fmt.Sprintf("bench-%s-%d", name, b.nsSeq)
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench-token", Namespace: ns}, StringData: map[string]string{"token": b.token}},
		&kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns}, Spec: kobev1.AccessPolicySpec{
			Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "bench-token"}}},
			Identity: "bench",
			Rules:    []kobev1.AccessRule{{Pools: []string{"*"}}},
		}},
	} {
		if err := b.env.Client.Create(ctx, o); err != nil {
			return "", fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return ns, nil
}

// operatorIn makes a fresh namespace (see namespace) and starts an operator
// for it; the caller stops it (op.stop).
func (b *bench) operatorIn(ctx context.Context, name string, extra ...string) (string, *operator, error) {
	ns, err := b.namespace(ctx, name)
	if err != nil {
		return "", nil, err
	}
	op, err := startOperator(ctx, b.env.Kubeconfig, ns, b.work, extra...)
	if err != nil {
		return "", nil, err
	}
	return ns, op, nil
}

// simPool is a pool of the sim backend.
func simPool(ns, name string, size int32, readyAfter time.Duration) *kobev1.ClusterPool {
	return &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To(size),
			TTL:  &metav1.Duration{Duration: time.Hour},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: &kobev1.SimBackendSpec{
				ReadyAfter: &metav1.Duration{Duration: readyAfter},
			}},
		},
	}
}

// logf prints progress with the time, so a long run shows where it is.
func logf(format string, a ...any) {
	fmt.Printf("%s bench: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// pollAlive is testenv.Poll that gives up at once, with the operator's log,
// when the operator has died.
func pollAlive(ctx context.Context, op *operator, within time.Duration, cond func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var dead error
	err := testenv.Poll(ctx, within, func() error {
		if err := op.alive(); err != nil {
			dead = err
			cancel()
			return err
		}
		return cond()
	})
	if dead != nil {
		return dead
	}
	return err
}

func inNamespace(ns string) client.InNamespace { return client.InNamespace(ns) }

// machine describes the host for the report.
func machine() map[string]string {
	out := map[string]string{"cores": fmt.Sprint(runtime.NumCPU()), "goos": runtime.GOOS, "goarch": runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				out["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err == nil {
					out["memory"] = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		out["loadavg_at_start"] = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return out
}
