package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kubectlTimeout bounds one kubectl call.
const kubectlTimeout = 30 * time.Second

// KubectlPath is kubectl from PATH (make puts the control-plane directory,
// which holds one on machines without it, on PATH), else the one in BinDir;
// the test fails when there is none.
func KubectlPath(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	p := filepath.Join(BinDir(), "kubectl")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kubectl is neither on PATH nor in %s: run `make controlplane`", BinDir())
	}
	return p
}

// Kubectl runs kubectl against the kubeconfig file at path (at most 30 s)
// and returns its trimmed combined output.
func Kubectl(t testing.TB, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd, cancel := kubectl(t, kubeconfig, args)
	defer cancel()
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// KubectlStdout is Kubectl that returns only the trimmed standard output,
// so that what a command printed can be compared exactly; standard error
// (kubectl's warnings, "No resources found") goes into the error only.
func KubectlStdout(t testing.TB, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd, cancel := kubectl(t, kubeconfig, args)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return strings.TrimSpace(stdout.String()), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// MustKubectl is KubectlStdout that fails the test when kubectl fails.
func MustKubectl(t testing.TB, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := KubectlStdout(t, kubeconfig, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// kubectl is the command of Kubectl and KubectlStdout, bounded by the
// test's context and kubectlTimeout.
func kubectl(t testing.TB, kubeconfig string, args []string) (*exec.Cmd, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), kubectlTimeout)
	return exec.CommandContext(ctx, KubectlPath(t), append([]string{"--kubeconfig", kubeconfig, "--request-timeout", "10s"}, args...)...), cancel
}

// BuildCommands builds ./cmd/<name> of the repository into dir for each
// name (usable from TestMain, hence no testing.TB). The build cache makes
// a second build cheap, and a binary is always the tree's, never a stale
// one from bin/.
func BuildCommands(dir string, names ...string) error {
	for _, name := range names {
		c := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		c.Dir = RepoRoot()
		if out, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", name, err, out)
		}
	}
	return nil
}

// KubeconfigFile writes kubeconfig to a file of the test's temporary
// directory (mode 0600) and returns its path.
func KubeconfigFile(t testing.TB, kubeconfig []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "kubeconfig-*")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// FreeFixedPort returns a free port below Linux's ephemeral range
// (32768-60999), for a port a test hands to a program that binds it later:
// a port FreePort found can be given by the kernel to any bind of :0 in
// between (seen: make run's own health-probe listener took the port meant
// for its API).
func FreeFixedPort() (int, error) {
	for range 200 {
		port := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port between 20000 and 32000 in 200 tries")
}

// FreePort returns a loopback TCP port that was free a moment ago (usable
// from TestMain, hence no testing.TB).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ShellEnv is this process's environment without make's variables
// (MAKEFLAGS, MFLAGS, MAKELEVEL), so that a make started by a test runs as
// typed in a shell and not as a sub-make of whatever make runs the test.
func ShellEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			env = append(env, kv)
		}
	}
	return env
}
