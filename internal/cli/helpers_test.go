package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
)

// testEnv isolates a test from the caller's kobe settings: a config file
// and runtime folder of its own, no KOBE_* variables.
type testEnv struct {
	config     string
	runtimeDir string
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	dir := t.TempDir()
	e := &testEnv{config: filepath.Join(dir, "config", "config.yaml"), runtimeDir: filepath.Join(dir, "run")}
	for _, k := range overridingEnv {
		t.Setenv(k, "")
	}
	t.Setenv("KOBE_CONFIG", e.config)
	t.Setenv("XDG_RUNTIME_DIR", e.runtimeDir)
	t.Setenv("SSH_AUTH_SOCK", "")
	return e
}

// withServer points the environment at srv with its valid token.
func (e *testEnv) withServer(t *testing.T, srv *apiclienttest.Server) {
	t.Helper()
	t.Setenv("KOBE_ENDPOINT", srv.URL)
	t.Setenv("KOBE_TOKEN", apiclienttest.Token)
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// kobe runs the CLI in-process.
func kobe(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Execute(t.Context(), args, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

// mustKobe runs the CLI and fails the test unless it exits 0.
func mustKobe(t *testing.T, args ...string) result {
	t.Helper()
	r := kobe(t, args...)
	if r.code != 0 {
		t.Fatalf("kobe %s: %s", strings.Join(args, " "), r)
	}
	return r
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}
