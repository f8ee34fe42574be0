package testenv

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// shared is a test binary's one control plane: started by the first test
// that asks for it, stopped by Main once every test has run.
type shared struct {
	// main is set by Main before any test runs.
	main bool
	once sync.Once
	env  *Env
	stop func() error
	dir  string
	err  error
}

var pkgShared shared

// Main runs a package's tests and then stops the control plane Shared
// started, if any test asked for one; it exits with m.Run's code. Call it
// from TestMain, in a file with the build tag of the tests that use Shared.
// The controllers' log is discarded unless KOBE_TEST_LOG is set.
func Main(m *testing.M) {
	if os.Getenv("KOBE_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	os.Exit(pkgShared.run(m))
}

// Shared returns the package's one control plane, started on first use:
// starting one costs seconds of CPU, so a package's tests share it and keep
// apart by namespace (NewNamespace, and NewManager with those namespaces so
// that no controller of one test reconciles another's objects). A start
// error fails every test that asks. The package's TestMain must call Main;
// a test that needs a control plane of its own (API server flags, or one it
// stops) uses Start.
func Shared(t testing.TB) *Env {
	t.Helper()
	return pkgShared.get(t)
}

func (s *shared) run(m interface{ Run() int }) int {
	s.main = true
	code := m.Run()
	if err := s.close(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping the shared test control plane: %v\n", err)
	}
	return code
}

func (s *shared) get(t testing.TB) *Env {
	t.Helper()
	if !s.main {
		t.Fatal("testenv.Shared: no shared control plane in this test binary: call testenv.Main(m) from TestMain")
		return nil
	}
	s.once.Do(s.start)
	if s.err != nil {
		t.Fatalf("testenv.Shared: %v", s.err)
		return nil
	}
	return s.env
}

func (s *shared) start() {
	dir, err := os.MkdirTemp("", "kobe-testenv-")
	if err != nil {
		s.err = fmt.Errorf("creating the shared control plane's directory: %w", err)
		return
	}
	s.dir = dir
	s.env, s.stop, s.err = New(dir)
}

// close stops the control plane and removes its directory; it runs after
// every test has returned.
func (s *shared) close() error {
	var errs []error
	if s.stop != nil {
		errs = append(errs, s.stop())
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}
