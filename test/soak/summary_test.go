//go:build soak

package soak

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// afterFault is how long after a fault's injection a hand-out counts as
// begun under it.
const afterFault = 20 * time.Second

// summarise gathers a run's figures from the recorder and the replicas.
func summarise(rec *recorder, reps *replicas, began time.Time, load0 string) Result {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := Result{
		Date: began.UTC().Format(time.RFC3339), Commit: commit(), Machine: machineText(),
		LoadStart: load0, LoadEnd: loadavg(), Asked: *duration, FaultEvery: *faultEvery,
		Clients: *clients, PoolSize: poolSize, Stats: rec.c.Stats(), Refused: rec.refused,
		PostsCut: rec.postsCut, Errors: rec.errs, ReleaseAnswers: rec.releaseKO, Violations: rec.c.Violations(),
	}
	var all, after []time.Duration
	var first, last time.Time
	for _, h := range rec.handouts {
		all = append(all, h.took)
		if h.pending {
			r.PendingThenBound++
		}
		if beganAfterFault(h.start, rec.faults) {
			after = append(after, h.took)
		}
		if first.IsZero() || h.start.Before(first) {
			first = h.start
		}
		if end := h.start.Add(h.took); end.After(last) {
			last = end
		}
	}
	r.Took = last.Sub(first)
	r.Handout, r.AfterFault = NewLatency(all), NewLatency(after)
	r.Faults = faultRows(rec.faults)
	reps.mu.Lock()
	r.Starts, r.SelfExits = len(reps.all), reps.selfExits
	reps.mu.Unlock()
	return r
}

func beganAfterFault(t time.Time, faults []fault) bool {
	for _, f := range faults {
		if !t.Before(f.at) && t.Sub(f.at) < afterFault {
			return true
		}
	}
	return false
}

// faultRows groups the faults by kind, in the rotation's order.
func faultRows(faults []fault) []FaultRow {
	var rows []FaultRow
	for _, kind := range faultRotation {
		row := FaultRow{Kind: kind}
		var rec, lingered []time.Duration
		targets := map[string]int{}
		for _, f := range faults {
			if f.kind != kind {
				continue
			}
			row.Count++
			targets[f.target]++
			if f.err != "" {
				row.Failed++
				continue
			}
			rec = append(rec, f.recovered)
			if f.lingered > 0 {
				lingered = append(lingered, f.lingered)
			}
		}
		row.Recovery, row.Lingered = NewLatency(rec), NewLatency(lingered)
		var ts []string
		for k, v := range targets {
			ts = append(ts, fmt.Sprintf("%s x%d", k, v))
		}
		sort.Strings(ts)
		row.Targets = strings.Join(ts, ", ")
		rows = append(rows, row)
	}
	return rows
}

func commit() string {
	out, err := exec.Command("git", "-C", testenv.RepoRoot(), "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func machineText() string {
	return fmt.Sprintf("%d cores, %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}

// docsPath is the repository's docs/benchmarks.md.
func docsPath() string { return filepath.Join(testenv.RepoRoot(), "docs", "benchmarks.md") }
