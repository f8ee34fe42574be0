package clusterinstance

import (
	"testing"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// A member's routine life records no Event; what a person acts on does.
func TestActionable(t *testing.T) {
	for _, tc := range []struct {
		phase  kobev1.InstancePhase
		reason string
		want   bool
	}{
		{kobev1.InstanceCreating, kobev1.ReasonCreating, false},
		{kobev1.InstanceReady, kobev1.ReasonGatePassed, false},
		{kobev1.InstanceLeased, kobev1.ReasonBound, false},
		{kobev1.InstanceRecycling, kobev1.ReasonLeaseEnded, false},
		{kobev1.InstanceRecycling, kobev1.ReasonScaledDown, false},
		{kobev1.InstanceRecycling, kobev1.ReasonPoolDeleted, false},
		{kobev1.InstanceRecycling, kobev1.ReasonUnhealthy, true},
		{kobev1.InstanceRecycling, kobev1.ReasonInstanceLost, true},
		{kobev1.InstanceRecycling, kobev1.ReasonCreatingTimeout, true},
		{kobev1.InstanceQuarantined, kobev1.ReasonCleanupUnproven, true},
	} {
		if got := actionable(tc.phase, tc.reason); got != tc.want {
			t.Errorf("actionable(%s, %s) = %v, want %v", tc.phase, tc.reason, got, tc.want)
		}
	}
}
