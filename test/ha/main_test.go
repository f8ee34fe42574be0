//go:build heavy

package ha

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// suite is what every test shares: the test API server and the operator
// binary.
var suite struct {
	env  *testenv.Env
	work string
	// binary is the kobe-operator built from the tree.
	binary string
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ha:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctrllog.SetLogger(logr.Discard()) // the test API server's start-up chatter
	work, err := os.MkdirTemp("", "kobe-ha-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	suite.work = work
	if suite.binary, err = operatorproc.Build(filepath.Join(work, "bin")); err != nil {
		return 1, err
	}
	env, stop, err := testenv.New(work)
	if err != nil {
		return 1, err
	}
	defer func() { _ = stop() }()
	suite.env = env
	return m.Run(), nil
}
