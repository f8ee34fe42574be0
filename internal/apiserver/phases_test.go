//go:build integration

package apiserver_test

import (
	"net/http"
	"testing"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kunobi-ninja/kobe/internal/metrics"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// phaseCounts reads how many observations kobe_handout_phase_seconds holds
// per phase, from the registry the operator's /metrics serves.
func phaseCounts(t *testing.T) map[string]uint64 {
	t.Helper()
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() != "kobe_handout_phase_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" {
					out[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}

// TestHandoutPhases: a hand-out from a Ready member is timed in each of its
// phases, so a slow one on a user's cluster can be explained from /metrics.
func TestHandoutPhases(t *testing.T) {
	before := phaseCounts(t)
	l := decode[wire.Lease](t, call(t, tokenOf("aliaser"), http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "ci-small"}), http.StatusCreated)
	if l.Kubeconfig == "" {
		t.Fatalf("the lease was not handed out with a kubeconfig: %+v", l)
	}
	after := phaseCounts(t)
	for _, phase := range []string{metrics.PhaseAuthenticate, metrics.PhaseAdmit, metrics.PhaseCreate, metrics.PhaseBind, metrics.PhaseMint, metrics.PhaseAnswer} {
		if after[phase] != before[phase]+1 {
			t.Errorf("phase %s: %d observations after one hand-out, want %d (before: %v, after: %v)", phase, after[phase], before[phase]+1, before, after)
		}
	}
}
