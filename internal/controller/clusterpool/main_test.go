//go:build heavy

package clusterpool

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestMain sets the controllers' logger (KOBE_TEST_LOG=1 shows it) and
// stops the control plane the tests share (testenv.Shared).
func TestMain(m *testing.M) {
	if os.Getenv("KOBE_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	testenv.Main(m)
}
