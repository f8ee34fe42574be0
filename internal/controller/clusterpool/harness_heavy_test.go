//go:build heavy

package clusterpool

import (
	"testing"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/local"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// poolController sets up the pool controller alone (no instance controller:
// members stay as they are made) on mgr, with the indexes and a local
// backend; configure may wrap its client or live reader before it is
// registered. The caller starts the manager (testenv.StartManager).
func poolController(t *testing.T, mgr manager.Manager, configure func(*Reconciler)) *Reconciler {
	t.Helper()
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	lb, err := local.New(local.Options{BinDir: testenv.BinDir(), DataRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lb.Close)
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName),
		Backends: backend.Registry{kobev1.BackendLocal: lb}, Clock: clock.RealClock{}}
	if configure != nil {
		configure(r)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	return r
}
