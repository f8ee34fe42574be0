package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// fatalRecorder records what a test would fail with, and goes on.
type fatalRecorder struct {
	testing.TB
	fatals []string
}

func (r *fatalRecorder) Helper()           {}
func (r *fatalRecorder) Fatal(args ...any) { r.fatals = append(r.fatals, fmt.Sprint(args...)) }
func (r *fatalRecorder) Fatalf(f string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(f, args...))
}

// TestSharedWithoutMain: a package whose TestMain does not call Main gets
// no control plane, and the test is told what to do.
func TestSharedWithoutMain(t *testing.T) {
	var s shared
	rec := &fatalRecorder{TB: t}
	if env := s.get(rec); env != nil {
		t.Errorf("got a control plane without Main: %+v", env)
	}
	if len(rec.fatals) != 1 || !strings.Contains(rec.fatals[0], "call testenv.Main(m) from TestMain") {
		t.Errorf("failures %q, want one telling to call testenv.Main(m) from TestMain", rec.fatals)
	}
	if s.dir != "" || s.stop != nil {
		t.Errorf("a control plane was started: dir %q", s.dir)
	}
}

// TestSharedStartErrorFailsEveryTest: a control plane that cannot start
// fails each test that asks for it, with the reason, and is tried once.
func TestSharedStartErrorFailsEveryTest(t *testing.T) {
	t.Setenv("CONTROLPLANE_DIR", t.TempDir()) // no binaries there
	s := shared{main: true}
	rec := &fatalRecorder{TB: t}
	for range 2 {
		if env := s.get(rec); env != nil {
			t.Errorf("got a control plane from an empty binary directory: %+v", env)
		}
	}
	if len(rec.fatals) != 2 || rec.fatals[0] != rec.fatals[1] || !strings.Contains(rec.fatals[0], "make controlplane") {
		t.Errorf("failures %q, want the same start error twice", rec.fatals)
	}
	dir := s.dir
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left after close: %v", dir, err)
	}
}
