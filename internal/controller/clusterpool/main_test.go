//go:build heavy

package clusterpool

import (
	"testing"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestMain stops the control plane the tests share (testenv.Shared);
// KOBE_TEST_LOG=1 shows the controllers' log.
func TestMain(m *testing.M) { testenv.Main(m) }
