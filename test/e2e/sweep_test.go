//go:build e2e && heavy

package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestLeakSweepReports: a member directory no ClusterInstance owns that
// appears while the operator runs (a member of this namespace, leaked by a
// crash or by hand) is reported by the periodic sweep, in the operator's
// log, and left alone: the operator runs without --leak-sweep-delete.
func TestLeakSweepReports(t *testing.T) {
	// The start-up sweep destroys what it finds: the leak must come after
	// the sweep of the operator's latest start (a test before may have
	// restarted it).
	testenv.Eventually(t, time.Minute, "the start-up sweep", func() error {
		starts, sweeps := logCount("Starting kobe operator"), logCount("Start-up sweep done")
		if starts == 0 || sweeps < starts {
			return fmt.Errorf("%d starts, %d start-up sweeps done", starts, sweeps)
		}
		return nil
	})
	leaked := filepath.Join(s.dataRoot, namespace+"_leaked-0_0b3b6a0e-5a1c-4f5e-9d6c-1f2e3d4c5b6a")
	if err := os.MkdirAll(leaked, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(leaked) })
	testenv.Eventually(t, 30*time.Second, "the leak in the operator's log", func() error {
		return logHas("Found members nobody owns", filepath.Base(leaked))
	})
	if _, err := os.Stat(leaked); err != nil {
		t.Errorf("the report-only sweep removed the leaked directory: %v", err)
	}
}

// logCount counts the lines of the operator's whole log that hold part.
func logCount(part string) int {
	b, _ := os.ReadFile(filepath.Join(s.work, "operator.log"))
	return strings.Count(string(b), part)
}

// logHas reports whether one line of the operator's whole log holds every
// part.
func logHas(parts ...string) error {
	b, err := os.ReadFile(filepath.Join(s.work, "operator.log"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return nil
		}
	}
	return errors.New("no log line has " + strings.Join(parts, " and "))
}
