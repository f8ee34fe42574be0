//go:build heavy

package local

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
)

const readyDeadline = 90 * time.Second

// binDir is where the tests find the control-plane binaries
// (CONTROLPLANE_DIR overrides it); they fail, never skip, when one is
// missing.
func binDir(t testing.TB) string {
	t.Helper()
	dir := testenv.BinDir()
	for _, c := range []string{compEtcd, compAPIServer, compKCM} {
		if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
			t.Fatalf("control-plane binary %s is missing: run `make controlplane` (hack/build-controlplane.sh) first", filepath.Join(dir, c))
		}
	}
	return dir
}

// newBackend returns a Backend over a fresh DataRoot whose members are all
// destroyed when the test ends.
func newBackend(t testing.TB, mutate ...func(*Options)) *Backend {
	t.Helper()
	opts := Options{BinDir: binDir(t), DataRoot: t.TempDir(), Logger: testr.NewWithInterface(t, testr.Options{})}
	for _, f := range mutate {
		f(&opts)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupDataRoot(t, b) })
	return b
}

// cleanupDataRoot stops every process under the backend's DataRoot.
func cleanupDataRoot(t testing.TB, b *Backend) {
	b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.Sweep(ctx, func(string, types.UID) bool { return false }); err != nil {
		t.Errorf("cleaning up %s: %v", b.opts.DataRoot, err)
	}
	if pids := runningUnder(t, b.opts.DataRoot); len(pids) > 0 {
		t.Errorf("processes still running under %s after cleanup: %v", b.opts.DataRoot, pids)
	}
}

func newMember(name string) backend.Member {
	return backend.Member{Namespace: "pool-ns", Name: name, UID: uuid.NewUUID(), Pool: "p"}
}

// waitFor calls Observe until the member reaches want or the deadline passes.
func waitFor(t *testing.T, b *Backend, m backend.Member, want backend.State, timeout time.Duration) backend.Observation {
	t.Helper()
	obs, err := waitForState(t, b, m, want, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

func waitForState(t testing.TB, b *Backend, m backend.Member, want backend.State, timeout time.Duration) (backend.Observation, error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last backend.Observation
	for {
		obs, err := b.Observe(t.Context(), m)
		if err != nil {
			return obs, fmt.Errorf("observe %s: %w", m.Name, err)
		}
		if obs.State == want {
			return obs, nil
		}
		if obs.State == backend.StateFailed && want != backend.StateFailed {
			return obs, fmt.Errorf("member %s failed: %s", m.Name, obs.Message)
		}
		if obs.State != last.State || obs.Message != last.Message {
			t.Logf("member %s: %.1f s: %s %s", m.Name, time.Since(deadline.Add(-timeout)).Seconds(), obs.State, obs.Message)
		}
		last = obs
		if time.Now().After(deadline) {
			return obs, fmt.Errorf("member %s not %s after %s: last %s %q", m.Name, want, timeout, obs.State, obs.Message)
		}
		select {
		case <-t.Context().Done():
			return obs, t.Context().Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runningUnder lists live processes (zombies excluded) whose command line
// mentions dir.
func runningUnder(t testing.TB, dir string) []memberproc.Process {
	t.Helper()
	ps, err := memberproc.Running(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// Helper operator: TestMain runs it instead of the tests when
// KOBE_LOCAL_HELPER is set, so a test can kill an "operator" that created
// members with SIGKILL and check that its members survive.
const (
	helperEnv = "KOBE_LOCAL_HELPER"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperOperator())
	}
	os.Exit(m.Run())
}

// helperOperator creates one member from the environment, reports on stdout,
// and then waits to be killed.
func helperOperator() int {
	b, err := New(Options{BinDir: os.Getenv("KOBE_BIN_DIR"), DataRoot: os.Getenv("KOBE_DATA_ROOT")})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	m := backend.Member{Namespace: "pool-ns", Name: os.Getenv("KOBE_MEMBER_NAME"), UID: types.UID(os.Getenv("KOBE_MEMBER_UID"))}
	ctx := context.Background()
	if err := b.Create(ctx, m); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("created")
	if os.Getenv("KOBE_WAIT_READY") != "" {
		deadline := time.Now().Add(readyDeadline)
		for {
			obs, err := b.Observe(ctx, m)
			if err != nil || obs.State == backend.StateFailed || time.Now().After(deadline) {
				fmt.Println("error:", err, obs.State, obs.Message)
				return 1
			}
			if obs.State == backend.StateReady {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		fmt.Println("ready")
	}
	select {}
}

// createInHelper creates m from a separate "operator" process, waits until it
// reports (created or ready), and kills it with SIGKILL.
func createInHelper(t *testing.T, b *Backend, m backend.Member, waitReady bool) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(),
		helperEnv+"=1",
		"KOBE_BIN_DIR="+b.opts.BinDir,
		"KOBE_DATA_ROOT="+b.opts.DataRoot,
		"KOBE_MEMBER_NAME="+m.Name,
		"KOBE_MEMBER_UID="+string(m.UID),
	)
	want := "created"
	if waitReady {
		cmd.Env = append(cmd.Env, "KOBE_WAIT_READY=1")
		want = "ready"
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(readyDeadline + 10*time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("helper operator exited before %q", want)
			}
			if strings.HasPrefix(line, "error:") {
				t.Fatalf("helper operator: %s", line)
			}
			if line == want {
				// SIGKILL: no chance to clean up, as in an operator crash.
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				return
			}
		case <-timeout:
			t.Fatalf("helper operator did not report %q in time", want)
		}
	}
}
