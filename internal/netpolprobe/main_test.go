//go:build integration

package netpolprobe

import (
	"testing"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestMain stops the control plane the tests share (testenv.Shared).
func TestMain(m *testing.M) { testenv.Main(m) }
