//go:build soak

package soak

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// The soak's flags (make soak SOAK_DURATION=5m, SOAK_ARGS for the rest).
var (
	duration   = flag.Duration("soak.duration", 30*time.Minute, "how long the clients lease and the faults are injected")
	faultEvery = flag.Duration("soak.fault-every", 30*time.Second, "time between two faults, which rotate: SIGKILL of a replica, SIGSTOP of the leader, restart of kube-apiserver")
	clients    = flag.Int("soak.clients", 16, "concurrent clients")
	writeDocs  = flag.Bool("soak.write", false, "write the run's figures into docs/benchmarks.md (make soak sets it)")
	logDir     = flag.String("soak.log-dir", "", "keep the replicas' logs here (default: a temporary directory, removed)")
)

// suite is the test API server (restartable) and the operator binary.
var suite struct {
	env    *testenv.Env
	work   string
	binary string
}

func TestMain(m *testing.M) {
	flag.Parse()
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctrllog.SetLogger(logr.Discard()) // the test API server's start-up chatter
	work, err := os.MkdirTemp("", "kobe-soak-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(work)
	suite.work = work
	if suite.binary, err = operatorproc.Build(filepath.Join(work, "bin")); err != nil {
		return 1, err
	}
	env, stop, err := testenv.NewWith(work, testenv.Options{RestartableAPIServer: true})
	if err != nil {
		return 1, err
	}
	defer func() { _ = stop() }()
	suite.env = env
	return m.Run(), nil
}
