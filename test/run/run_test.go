//go:build e2e

package run

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
)

const (
	// startDeadline bounds `make run` up to "kobe is running": building the
	// binaries (cached in CI after the build step) and the host control plane.
	startDeadline = 6 * time.Minute
	// readyDeadline bounds the demo pool filling with two real members.
	readyDeadline = 5 * time.Minute
	// stopDeadline is the promise: Ctrl-C stops everything within
	// it, members included.
	stopDeadline = 30 * time.Second
	ctrlC        = 0x03
)

// TestMakeRunStopsOnCtrlC types `make run` in a terminal, waits until the
// demo pool has two Ready members, presses Ctrl-C, and checks that within
// 30 s make has exited and no process of the run (host etcd and
// kube-apiserver, hostcp, the operator, every member's components) and no
// member directory is left. Processes are found by the run's state
// directory on their command lines, read from /proc.
func TestMakeRunStopsOnCtrlC(t *testing.T) {
	makeRunStops(t, func(t *testing.T, _ *exec.Cmd, ptmx *os.File) {
		// Ctrl-C as the terminal does it: the line discipline turns ^C
		// into SIGINT for the foreground process group.
		if _, err := ptmx.Write([]byte{ctrlC}); err != nil {
			t.Fatalf("pressing Ctrl-C: %v", err)
		}
	})
}

// TestMakeRunForcedStopLeavesNothing: with a member leased, SIGTERM to
// make run's whole process group twice (what a CI cancellation or `kill --
// -PGID` does: make forwards it, so the script sees a second signal and
// takes its forced path, killing the operator at once). Nothing of the
// members may be left: no process, directory, cgroup, fence or mount.
func TestMakeRunForcedStopLeavesNothing(t *testing.T) {
	makeRunStops(t, func(t *testing.T, cmd *exec.Cmd, _ *os.File) {
		for range 2 {
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
				t.Fatalf("SIGTERM to make run's process group: %v", err)
			}
			time.Sleep(300 * time.Millisecond)
		}
	})
}

// makeRunStops starts make run, waits for its pool (and leases one of its
// members), stops it with stop and checks that nothing of it is left.
func makeRunStops(t *testing.T, stop func(t *testing.T, cmd *exec.Cmd, ptmx *os.File)) {
	state := t.TempDir()
	port, err := testenv.FreeFixedPort()
	if err != nil {
		t.Fatal(err)
	}
	members := filepath.Join(state, "members")

	cmd := exec.Command("make", "--no-print-directory", "run")
	cmd.Dir = testenv.RepoRoot()
	// As typed in a shell: not a sub-make of whatever make runs this test.
	cmd.Env = testenv.ShellEnv()
	// API-only members: make test runs as root in CI, where make run would
	// build kubelet and give each member a node (test/localnodes covers
	// default pools with nodes, in the root layer).
	cmd.Env = append(cmd.Env, "KOBE_API_PORT="+strconv.Itoa(port), "KOBE_STATE_DIR="+state, "KOBE_RUN_NODES=0")
	// pty.Start makes make the leader of a new session whose controlling
	// terminal is the pty, so make is its foreground process group, as a
	// command typed in a shell is.
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		t.Fatalf("starting make run in a terminal: %v", err)
	}
	term := &testenv.Output{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(term, ptmx) // ends with EIO once every writer is gone
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	t.Cleanup(func() {
		// Whatever happened, leave the machine clean.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for range 3 {
			left, _ := memberproc.Running(state + "/")
			if len(left) == 0 {
				break
			}
			memberproc.Kill(left)
			time.Sleep(time.Second)
		}
		_ = ptmx.Close()
		if t.Failed() {
			t.Logf("terminal:\n%s", term)
			for _, f := range []string{"operator.log", "hostcp.log"} {
				if b, err := os.ReadFile(filepath.Join(state, f)); err == nil {
					t.Logf("%s (end):\n%s", f, tail(b, 4000))
				}
			}
		}
	})

	// The commands to paste are printed only when the API answers.
	waitOutput(t, term, exited, startDeadline, "kobe is running")
	// The API is served over TLS with the run's own CA.
	ca, err := os.ReadFile(filepath.Join(state, "tls", "ca.crt"))
	if err != nil {
		t.Fatalf("make run wrote no CA: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("make run's ca.crt holds no certificate")
	}
	verified := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	resp, err := verified.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", port))
	if err != nil {
		t.Fatalf("make run printed that kobe is running, but its API does not answer: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("make run printed that kobe is running, but /readyz answers %d", resp.StatusCode)
	}
	for _, want := range []string{"export KOBE_CONFIG=" + filepath.Join(state, "kobe.yaml") + " KOBE_ENDPOINT=https://127.0.0.1:" + strconv.Itoa(port), "bin/kobe lease dev"} {
		if !strings.Contains(term.String(), want) {
			t.Fatalf("make run did not print %q", want)
		}
	}

	kubeconfig := filepath.Join(state, "host.kubeconfig")
	testenv.Eventually(t, readyDeadline, "the demo pool to have 2 Ready members", func() error {
		select {
		case err := <-exited:
			t.Fatalf("make run exited before the pool was ready: %v", err)
		default:
		}
		out, err := testenv.Kubectl(t, kubeconfig, "get", "clusterpool", "dev", "-o", "jsonpath={.status.ready}")
		if err != nil {
			return fmt.Errorf("kubectl: %w: %s", err, out)
		}
		if out != "2" {
			return fmt.Errorf("ready members: %q", out)
		}
		return nil
	})
	dirs, err := memberproc.Dirs(members)
	if err != nil {
		t.Fatal(err)
	}
	running, err := memberproc.Running(members + "/")
	if err != nil {
		t.Fatal(err)
	}
	// A member with a disk limit (run as root) also has its file system's
	// image beside its directory.
	dirs = slices.DeleteFunc(dirs, func(name string) bool { return strings.HasSuffix(name, ".disk") })
	if len(dirs) != 2 || len(running) < 4 {
		t.Fatalf("with 2 Ready members, found member directories %v and member processes %v", dirs, running)
	}
	// The printed commands work: the CLI finds the CA and the token in
	// the config file make run wrote.
	pools := exec.CommandContext(t.Context(), filepath.Join(testenv.RepoRoot(), "bin", "kobe"), "pools")
	pools.Env = append(os.Environ(), "KOBE_CONFIG="+filepath.Join(state, "kobe.yaml"), "KOBE_ENDPOINT=https://127.0.0.1:"+strconv.Itoa(port))
	if out, err := pools.CombinedOutput(); err != nil || !strings.Contains(string(out), "dev") {
		t.Fatalf("bin/kobe pools as make run printed it: %v\n%s", err, out)
	}
	// A member leased, as a user's would be when the run is stopped.
	lease := exec.CommandContext(t.Context(), filepath.Join(testenv.RepoRoot(), "bin", "kobe"), "lease", "dev", "--ttl", "10m", "--kubeconfig", filepath.Join(t.TempDir(), "kc"))
	lease.Env = pools.Env
	if out, err := lease.CombinedOutput(); err != nil {
		t.Fatalf("bin/kobe lease dev: %v\n%s", err, out)
	}
	memberUIDs := memberproc.UIDsOf(dirs)
	before, _ := memberproc.Running(state + "/")
	t.Logf("pool ready, a member leased; %d processes of the run: %v", len(before), before)

	pressed := time.Now()
	stop(t, cmd, ptmx)
	select {
	case err := <-exited:
		t.Logf("make exited %s after Ctrl-C (%v)", time.Since(pressed).Round(100*time.Millisecond), err)
	case <-time.After(stopDeadline):
		left, _ := memberproc.Running(state + "/")
		t.Fatalf("make run still runs %s after Ctrl-C; processes of the run: %v", stopDeadline, left)
	}
	var lastGone time.Duration
	err = testenv.Poll(t.Context(), stopDeadline-time.Since(pressed), func() error {
		left, err := memberproc.Running(state + "/")
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("processes of the run left: %v", left)
		}
		lastGone = time.Since(pressed)
		return nil
	})
	if err != nil {
		t.Fatalf("%s after Ctrl-C: %v", stopDeadline, err)
	}
	t.Logf("last process of the run gone %s after Ctrl-C", lastGone.Round(100*time.Millisecond))
	if dirs, err := memberproc.Dirs(members); err != nil || len(dirs) > 0 {
		t.Fatalf("member directories left after Ctrl-C: %v (%v)", dirs, err)
	}
	if left := memberproc.Left(state, memberUIDs); len(left) > 0 {
		t.Fatalf("left of the members after the stop: %v", left)
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	out := term.String()
	if !strings.Contains(out, "kobe stopped") {
		t.Fatalf("make run did not say it stopped")
	}
	if i := strings.LastIndex(out, "Press Ctrl-C"); i >= 0 {
		t.Logf("terminal after Ctrl-C:\n%s", out[i:])
	}
}

// waitOutput waits until the terminal shows want, failing early if make
// exits first.
func waitOutput(t *testing.T, term *testenv.Output, exited <-chan error, within time.Duration, want string) {
	t.Helper()
	testenv.Eventually(t, within, fmt.Sprintf("make run to print %q", want), func() error {
		if strings.Contains(term.String(), want) {
			return nil
		}
		select {
		case err := <-exited:
			t.Fatalf("make run exited before printing %q: %v", want, err)
		default:
		}
		return errors.New("not printed yet")
	})
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
