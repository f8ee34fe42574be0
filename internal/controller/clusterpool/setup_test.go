package clusterpool

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// nonNilClient only has to be non-nil: setup is refused before it is used.
type nonNilClient struct{ client.Client }

// TestSetupRefusesMissingDependencies: a reconciler wired without what it
// needs fails at setup, naming what is missing, instead of panicking later.
func TestSetupRefusesMissingDependencies(t *testing.T) {
	cases := []struct {
		missing string
		unset   func(*Reconciler)
	}{
		{"Client", func(r *Reconciler) { r.Client = nil }},
		{"Recorder", func(r *Reconciler) { r.Recorder = nil }},
		{"Backends", func(r *Reconciler) { r.Backends = nil }},
		{"Clock", func(r *Reconciler) { r.Clock = nil }},
	}
	for _, tc := range cases {
		t.Run(tc.missing, func(t *testing.T) {
			r := &Reconciler{Client: nonNilClient{}, Recorder: events.NewFakeRecorder(1), Backends: backend.Registry{}, Clock: clock.RealClock{}}
			tc.unset(r)
			err := r.SetupWithManager(nil) // refused before the manager is touched
			if err == nil || !strings.Contains(err.Error(), "missing "+tc.missing) {
				t.Errorf("SetupWithManager = %v, want it to name %s", err, tc.missing)
			}
		})
	}
	if err := (&Reconciler{}).validate(); err == nil || !strings.Contains(err.Error(), "missing Backends, Client, Clock, Recorder") {
		t.Errorf("validate() = %v, want every missing dependency named", err)
	}
}
