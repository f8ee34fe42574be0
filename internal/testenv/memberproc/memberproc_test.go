package memberproc_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
)

func pids(ps []memberproc.Process) []int {
	var out []int
	for _, p := range ps {
		out = append(out, p.PID)
	}
	return out
}

// TestRunningFindsLiveProcessesOnly starts processes that name a directory
// in their command line and checks that Running finds the live one, not one
// that mentions another directory nor a zombie.
func TestRunningFindsLiveProcessesOnly(t *testing.T) {
	dir := t.TempDir()
	start := func(arg string) *exec.Cmd {
		// sh keeps arg as its $0 while it loops.
		cmd := exec.Command("sh", "-c", "while :; do sleep 1; done", arg)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	live := start(filepath.Join(dir, "member-a"))
	other := start(filepath.Join(t.TempDir(), "member-b"))
	dead := start(filepath.Join(dir, "member-c"))
	if err := dead.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet, the killed process is a zombie until Wait (SIGKILL is
	// asynchronous, so it may take a moment to become one): Running skips it.
	testenv.Eventually(t, 10*time.Second, "the killed process to be left out", func() error {
		got, err := memberproc.Running(dir)
		if err != nil {
			return err
		}
		if slices.Contains(pids(got), dead.Process.Pid) {
			return fmt.Errorf("Running(%s) = %v still lists %d", dir, got, dead.Process.Pid)
		}
		// Retried, not fatal: a shell's child between its fork and its
		// exec of sleep carries the shell's command line for a moment.
		if !slices.Contains(pids(got), live.Process.Pid) || slices.Contains(pids(got), other.Process.Pid) || len(got) != 1 {
			return fmt.Errorf("Running(%s) = %v; want only %d", dir, got, live.Process.Pid)
		}
		return nil
	})
	memberproc.Kill([]memberproc.Process{{PID: live.Process.Pid}})
	_ = live.Wait()
	got, err := memberproc.Running(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("after Kill, Running(%s) = %v", dir, got)
	}
}

func TestDirAndComponents(t *testing.T) {
	root := t.TempDir()
	if d, err := memberproc.Dirs(filepath.Join(root, "missing")); err != nil || len(d) != 0 {
		t.Fatalf("Dirs of a missing root = %v, %v; want none", d, err)
	}
	memberDir := filepath.Join(root, "ns_pool-dev-0_1234-abcd")
	if err := os.MkdirAll(memberDir, 0o755); err != nil {
		t.Fatal(err)
	}
	state := `{"version":1,"processes":[{"component":"etcd","pid":41},{"component":"kube-apiserver","pid":42}]}`
	if err := os.WriteFile(filepath.Join(memberDir, "state.json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := memberproc.Dir(root, "1234-abcd")
	if err != nil || got != memberDir {
		t.Fatalf("Dir = %q, %v; want %q", got, err, memberDir)
	}
	if _, err := memberproc.Dir(root, "abcd"); err == nil {
		t.Fatal("Dir found a member by a UID suffix that is not the whole UID")
	}
	comps, err := memberproc.Components(memberDir)
	if err != nil {
		t.Fatal(err)
	}
	if comps["etcd"] != 41 || comps["kube-apiserver"] != 42 || len(comps) != 2 {
		t.Fatalf("Components = %v", comps)
	}
	if _, err := memberproc.Components(root); err == nil {
		t.Fatal("Components of a directory without a state file did not fail")
	}
}
