package bootstrap_test

import (
	"strings"
	"testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/bootstrap"
)

// TestJobsRefusal: Job bundles run only with --bootstrap-jobs and only for
// kubernetes backend members; the refusal says which of the two is missing.
func TestJobsRefusal(t *testing.T) {
	tests := []struct {
		name    string
		enabled bool
		backend kobev1.BackendType
		want    string // "" when the operator runs them
	}{
		{"kubernetes member, jobs on", true, kobev1.BackendKubernetes, ""},
		{"kubernetes member, jobs off", false, kobev1.BackendKubernetes, "--bootstrap-jobs is off"},
		{"local member, jobs on", true, kobev1.BackendLocal, "cannot reach a local member's API server"},
		{"local member, jobs off", false, kobev1.BackendLocal, "--bootstrap-jobs is off"},
		{"simulated member, jobs on", true, kobev1.BackendSim, "cannot reach a sim member's API server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bootstrap.JobsRefusal(tt.enabled, tt.backend)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("JobsRefusal = %q, want %q", got, tt.want)
			}
		})
	}
}
