//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// operator is one kobe-operator process started by the harness.
type operator struct {
	proc       *operatorproc.Process
	apiURL     string
	metricsURL string
	probeURL   string
}

// operatorBinary is bin/kobe-operator of the repository (`make build`).
func operatorBinary() (string, error) {
	p := *flagOperator
	if p == "" {
		p = filepath.Join(testenv.RepoRoot(), "bin", "kobe-operator")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("operator binary missing: run `make build` first (%w)", err)
	}
	return p, nil
}

// startOperator runs bin/kobe-operator against the test API server, serving
// namespace ns, with the sim backend enabled, loopback ports of its own and
// extra flags; it returns once /readyz answers 200 on the API port.
func startOperator(ctx context.Context, kubeconfig, ns, workDir string, extra ...string) (*operator, error) {
	bin, err := operatorBinary()
	if err != nil {
		return nil, err
	}
	// Every bench client is one caller: the default cap of 10 waiting
	// leases per caller would refuse the load being measured.
	args := append([]string{"--max-queued-per-owner", "1000000", "--default-max-concurrent-leases", "0"}, extra...)
	args = append(args, strings.Fields(*flagOperatorArgs)...)
	if *flagSim {
		args = append(args, "--enable-sim-backend")
	}
	if addr := os.Getenv("KOBE_BENCH_PPROF"); addr != "" {
		// Profile the operator: go tool pprof http://$KOBE_BENCH_PPROF/debug/pprof/profile
		args = append(args, "--pprof-bind-address", addr)
	}
	p, err := operatorproc.Start(operatorproc.Options{
		Binary: bin, Kubeconfig: kubeconfig, Namespace: ns, Dir: workDir, Name: "operator-" + ns, Args: args,
	})
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ctx, 90*time.Second); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return &operator{proc: p, apiURL: p.APIURL, metricsURL: p.MetricsURL + "/metrics", probeURL: p.ProbeURL}, nil
}

// alive returns an error, with the log's tail, once the process has exited.
func (op *operator) alive() error { return op.proc.Alive() }

// stop sends SIGTERM, waits up to 20 s, then SIGKILL.
func (op *operator) stop() { _ = op.proc.Stop() }

func (op *operator) pid() int { return op.proc.PID() }

// errorLines is the last n lines of the operator's log at level error: a
// 500 answers "the error has been logged", and this is where.
func (op *operator) errorLines(n int) string {
	var out []string
	for _, l := range strings.Split(op.proc.Log(), "\n") {
		if strings.Contains(l, `"level":"error"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// rssBytes reads VmRSS from /proc/<pid>/status.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "123456 kB"
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/<pid>/status")
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime reads utime+stime from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat %q", pid, s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// cpuShares tracks the CPU time of the processes that share the machine
// during a measurement: the operator, the test kube-apiserver and etcd
// (children of this process) and the harness itself.
type cpuShares struct {
	pids  map[string]int
	start map[string]time.Duration
	t0    time.Time
}

func newCPUShares(op *operator) (*cpuShares, error) {
	pids := map[string]int{"operator": op.pid(), "harness": os.Getpid()}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		comm := s[open+1 : closing]
		f := strings.Fields(s[closing+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if comm == "etcd" || comm == "kube-apiserver" {
			pids[comm] = pid
		}
	}
	for _, n := range []string{"etcd", "kube-apiserver"} {
		if pids[n] == 0 {
			return nil, fmt.Errorf("no %s process started by the harness found", n)
		}
	}
	c := &cpuShares{pids: pids, start: map[string]time.Duration{}, t0: time.Now()}
	for n, pid := range pids {
		if c.start[n], err = cpuTime(pid); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// add records each process's CPU since newCPUShares as a percentage of one
// core, under prefix.
func (c *cpuShares) add(out figures, prefix string) error {
	wall := time.Since(c.t0).Seconds()
	for n, pid := range c.pids {
		t, err := cpuTime(pid)
		if err != nil {
			return err
		}
		out[prefix+n+"_percent"] = 100 * (t - c.start[n]).Seconds() / wall
	}
	return nil
}
