//go:build e2e

package e2e

import (
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// waitCutOperatorKilled is h.WaitCut with the operator killed (SIGKILL) at
// once: the cut must not wait for the operator's teardown, which a leader
// that dies right after answering never runs. The operator is started
// again after the measure, for the tests that follow.
func waitCutOperatorKilled(t *testing.T, h *testenv.Holder, since time.Time, after string) time.Duration {
	t.Helper()
	s.killOperator()
	defer func() {
		if err := s.startOperator(); err != nil {
			t.Errorf("starting the operator again: %v", err)
		}
	}()
	return h.WaitCut(t, since, after+", the operator killed right after it", s.tail)
}
