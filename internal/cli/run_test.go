package cli

import (
	"bufio"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
)

func TestRunExitStatusAndRelease(t *testing.T) {
	tests := []struct {
		name     string
		command  string
		wantCode int
	}{
		{"success", "exit 0", 0},
		{"failure is passed through", "exit 3", 3},
		{"killed by a signal", "kill -KILL $$", 128 + 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t)
			srv := apiclienttest.New(t)
			e.withServer(t, srv)
			r := kobe(t, "run", "ci-small", "--", "sh", "-c", tt.command)
			if r.code != tt.wantCode {
				t.Fatalf("want exit %d: %s", tt.wantCode, r)
			}
			if got := srv.Released(); len(got) != 1 || got[0] != "lease-000000000001" {
				t.Errorf("lease not released: %v\n%s", got, r)
			}
			if !strings.Contains(r.stderr, "kobe: released lease lease-000000000001") {
				t.Errorf("%s", r)
			}
		})
	}
}

func TestRunGivesTheCommandTheKubeconfig(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)

	r := kobe(t, "run", "ci-small", "--ttl", "20m", "-q", "--", "sh", "-c",
		`echo "$KUBECONFIG"; echo "$KOBE_LEASE_ID"; stat -c %a "$KUBECONFIG"; cat "$KUBECONFIG"`)
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	lines := strings.SplitN(r.stdout, "\n", 4)
	if len(lines) != 4 {
		t.Fatalf("%s", r)
	}
	path, id, mode, content := lines[0], lines[1], lines[2], lines[3]
	if id != "lease-000000000001" || mode != "600" || !sameKubeconfig(t, content, apiclienttest.Kubeconfig(id)) {
		t.Errorf("child saw id %q, mode %q, kubeconfig %q", id, mode, content)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("temporary kubeconfig %s not removed: %v", path, err)
	}
	if r.stderr != "" {
		t.Errorf("-q must silence progress: %q", r.stderr)
	}
	if l, _ := srv.Lease(id); l.EffectiveTTL != "20m" {
		t.Errorf("ttl not passed: %+v", l)
	}
}

func TestRunFailsBeforeLeasing(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)

	tests := []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"run", "ci-small", "--", "no-such-command-kobe-test"}, ExitNotFound, "executable file not found"},
		{[]string{"run", "ci-small", "sh"}, ExitKobeFailed, "put `--` between the pool and the command"},
		{[]string{"run", "ci-small", "--"}, ExitKobeFailed, "put `--` between"},
		{[]string{"run", "ci-small", "--ttl", "0s", "--", "true"}, ExitKobeFailed, "not a positive duration"},
		{[]string{"run", "ci-small", "--bogus", "--", "true"}, ExitKobeFailed, "unknown flag: --bogus"},
	}
	for _, tt := range tests {
		r := kobe(t, tt.args...)
		if r.code != tt.wantCode || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("kobe %v: want exit %d and %q: %s", tt.args, tt.wantCode, tt.want, r)
		}
	}
	if slices.Contains(srv.Requests(), "POST /v1/leases") {
		t.Errorf("a lease was taken: %v", srv.Requests())
	}

	t.Setenv("KOBE_TOKEN", "wrong")
	if r := kobe(t, "run", "ci-small", "--", "true"); r.code != ExitKobeFailed || !strings.Contains(r.stderr, "unauthorized") {
		t.Errorf("API error: %s", r)
	}
}

func TestRunWaitTimeout(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(1<<20))
	e.withServer(t, srv)

	r := kobe(t, "run", "ci-small", "--wait-timeout", "200ms", "--", "true")
	if r.code != ExitWaitTimeout || !strings.Contains(r.stderr, "released it") {
		t.Fatalf("want exit %d: %s", ExitWaitTimeout, r)
	}
	if got := srv.Released(); len(got) != 1 {
		t.Errorf("queued lease not released: %v", got)
	}
}

// TestRunCancelled: when the context ends for another reason than a signal
// (an embedding program), the command gets SIGTERM and the lease is released.
func TestRunCancelled(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stdoutW := io.Pipe()
	var errOut strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, []string{"run", "ci-small", "-q", "--", "sh", "-c", "echo ready; exec sleep 60"},
			IOStreams{Out: stdoutW, ErrOut: &errOut})
		_ = stdoutW.Close()
	}()
	waitForLine(t, stdout, "ready")
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	cancel()
	select {
	case code := <-done:
		if code != 128+15 {
			t.Errorf("exit %d, want 143 (SIGTERM)\n%s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("kobe run did not end after its context was cancelled")
	}
	if got := srv.Released(); len(got) != 1 {
		t.Errorf("lease not released: %v", got)
	}
}

// waitForLine reads r until a line equal to want, failing after 30s.
func waitForLine(t *testing.T, r io.Reader, want string) {
	t.Helper()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if sc.Text() == want {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatalf("output ended without %q", want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no %q within 30s", want)
	}
}
