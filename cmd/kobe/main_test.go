package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
)

// These tests run the real kobe binary, so that signals reach it as they do
// in a terminal or a CI runner.

var kobeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kobe-cli-test-")
	if err != nil {
		panic(err)
	}
	kobeBin = filepath.Join(dir, "kobe")
	build := exec.Command("go", "build", "-o", kobeBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	code := 1
	if err := build.Run(); err == nil {
		code = m.Run()
	} else {
		fmt.Fprintln(os.Stderr, "building kobe:", err)
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running kobe binary whose output lines are read as they come.
type proc struct {
	cmd    *exec.Cmd
	stdout chan string
	stderr chan string
	done   chan struct{}
}

func startKobe(t *testing.T, srv *apiclienttest.Server, args ...string) *proc {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), kobeBin, args...)
	cmd.Env = append(os.Environ(),
		"KOBE_ENDPOINT="+srv.URL, "KOBE_TOKEN="+apiclienttest.Token, "KOBE_CONTEXT=", "KOBE_OIDC_TOKEN=", "KOBE_TOKEN_FILE=",
		"KOBE_CONFIG="+filepath.Join(t.TempDir(), "config.yaml"), "XDG_RUNTIME_DIR="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdout: lines(stdout), stderr: lines(stderr), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

func lines(r io.Reader) chan string {
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// waitLine waits up to 30s for a line of ch that contains want and returns it.
func waitLine(t *testing.T, ch chan string, want string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-ch:
			if !ok {
				t.Fatalf("output ended without %q", want)
			}
			if strings.Contains(line, want) {
				return line
			}
		case <-deadline:
			t.Fatalf("no line with %q within 30s", want)
		}
	}
}

// wait waits up to 30s for kobe to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	// Drain what is left so that Wait does not block on full pipes.
	go func() {
		for range p.stdout {
		}
	}()
	go func() {
		for range p.stderr {
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			t.Fatal(err)
		}
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatal("kobe did not exit within 30s")
		return -1
	}
}

func TestRunForwardsSignalsAndReleases(t *testing.T) {
	tests := []struct {
		name     string
		signal   syscall.Signal
		command  string
		wantCode int
	}{
		{"SIGTERM kills the command", syscall.SIGTERM, `echo "$KUBECONFIG"; echo ready; exec sleep 60`, 128 + 15},
		{"SIGINT kills the command", syscall.SIGINT, `echo "$KUBECONFIG"; echo ready; exec sleep 60`, 128 + 2},
		{"the command handles SIGTERM", syscall.SIGTERM,
			`trap 'echo cleaned up; exit 7' TERM; echo "$KUBECONFIG"; echo ready; while :; do sleep 0.05; done`, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := apiclienttest.New(t)
			p := startKobe(t, srv, "run", "ci-small", "--", "sh", "-c", tt.command)
			kubeconfig := waitLine(t, p.stdout, "kubeconfig")
			waitLine(t, p.stdout, "ready")
			if err := p.cmd.Process.Signal(tt.signal); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != tt.wantCode {
				t.Errorf("exit %d, want %d", code, tt.wantCode)
			}
			if got := srv.Released(); len(got) != 1 || got[0] != "lease-000000000001" {
				t.Errorf("the fake server saw no DELETE of the lease: released %v, requests %v", got, srv.Requests())
			}
			if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
				t.Errorf("temporary kubeconfig %s not removed: %v", kubeconfig, err)
			}
		})
	}
}

func TestRunExitStatusPassThrough(t *testing.T) {
	srv := apiclienttest.New(t)
	p := startKobe(t, srv, "run", "ci-small", "--", "sh", "-c", "exit 3")
	if code := p.wait(t); code != 3 {
		t.Errorf("exit %d, want 3", code)
	}
	if got := srv.Released(); len(got) != 1 {
		t.Errorf("lease not released: %v", got)
	}
}

func TestInterruptWhileQueuedReleases(t *testing.T) {
	for _, args := range [][]string{
		{"lease", "ci-small"},
		{"run", "ci-small", "--", "true"},
	} {
		t.Run(args[0], func(t *testing.T) {
			srv := apiclienttest.New(t, apiclienttest.WithPendingPolls(1<<20))
			p := startKobe(t, srv, args...)
			waitLine(t, p.stderr, "Waiting for a cluster")
			if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != 130 {
				t.Errorf("exit %d, want 130", code)
			}
			if got := srv.Released(); len(got) != 1 {
				t.Errorf("queued lease not released: %v", got)
			}
			if slices.Contains(srv.Requests(), "GET /v1/leases/lease-000000000001") == false {
				t.Errorf("kobe never polled: %v", srv.Requests())
			}
		})
	}
}
