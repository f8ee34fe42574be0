package cli

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// kobeUntil runs the CLI in the background and, once stop says so,
// cancels it as SIGTERM would; it returns the result.
func kobeUntil(t *testing.T, stop func() bool, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, args, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case code := <-done:
			return result{stdout: out.String(), stderr: errOut.String(), code: code}
		case <-deadline:
			t.Fatalf("kobe %s did not stop", strings.Join(args, " "))
		case <-time.After(20 * time.Millisecond):
			if stop() {
				cancel(&SignalError{Signal: syscall.SIGTERM})
			}
		}
	}
}

func TestLeaseKeepAliveBeatsThenReleasesOnExit(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)

	r := kobeUntil(t, func() bool { return len(srv.Heartbeats()) >= 1 }, "lease", "ci-small", "--keepalive", "--heartbeat-timeout", "10s")
	if r.code != 0 {
		t.Fatalf("kobe lease --keepalive stopped by SIGTERM: want exit 0 after releasing: %s", r)
	}
	id := "lease-000000000001"
	if got := srv.Heartbeats(); len(got) == 0 || got[0] != id {
		t.Fatalf("heartbeats = %v, want some for %s", got, id)
	}
	if got := srv.Released(); len(got) != 1 || got[0] != id {
		t.Fatalf("released = %v, want %s released on exit", got, id)
	}
	l, _ := srv.Lease(id)
	if l.HeartbeatTimeout != "10s" {
		t.Errorf("lease's heartbeat_timeout = %q, want the flag's 10s", l.HeartbeatTimeout)
	}
	path := filepath.Join(e.runtimeDir, "kobe", "kubeconfig-"+id)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("kubeconfig at the default path not removed on release: %v", err)
	}
	for _, want := range []string{"export KUBECONFIG=" + path, "# Ends 10s after its last heartbeat"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q: %s", want, r)
		}
	}
	if !strings.Contains(r.stderr, "Keeping lease "+id+" alive") || !strings.Contains(r.stderr, "Released lease "+id) {
		t.Errorf("stderr: %s", r)
	}
}

func TestLeaseKeepAliveDefaultTimeout(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	// Stopped once it holds the lease (its kubeconfig written): the lease's
	// request is what is looked at.
	path := filepath.Join(e.runtimeDir, "kobe", "kubeconfig-lease-000000000001")
	r := kobeUntil(t, func() bool { _, err := os.Stat(path); return err == nil }, "lease", "ci-small", "--keepalive")
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	if l, _ := srv.Lease("lease-000000000001"); l.HeartbeatTimeout != "5m" {
		t.Errorf("--keepalive without --heartbeat-timeout asked for %q, want 5m", l.HeartbeatTimeout)
	}
}

// A lease that ends under --keepalive (released elsewhere, its TTL) ends
// kobe with an error that says so, not a silent hang.
func TestLeaseKeepAliveEndsWithTheLease(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	released := false
	r := kobeUntil(t, func() bool {
		if !released {
			if _, ok := srv.Lease("lease-000000000001"); ok {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, srv.URL+"/v1/leases/lease-000000000001", nil)
				req.Header.Set("Authorization", "Bearer "+apiclienttest.Token)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_ = resp.Body.Close()
					released = true
				}
			}
		}
		return false
	}, "lease", "ci-small", "--keepalive", "--heartbeat-timeout", "10s")
	if r.code != 1 || !strings.Contains(r.stderr, "the lease has ended") {
		t.Fatalf("want exit 1 naming the ended lease: %s", r)
	}
}

func TestHeartbeatFlagsRefused(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"lease", "ci-small", "--keepalive", "--no-wait"}, "--keepalive and --no-wait cannot be combined"},
		{[]string{"lease", "ci-small", "--heartbeat-timeout", "5s"}, "between 10s and 24h0m0s"},
		{[]string{"lease", "ci-small", "--heartbeat-timeout", "25h"}, "between 10s and 24h0m0s"},
		{[]string{"lease", "ci-small", "--heartbeat-timeout", "-1m"}, "between 10s and 24h0m0s"},
		{[]string{"run", "ci-small", "--heartbeat-timeout", "1s", "--", "true"}, "between 10s and 24h0m0s"},
		{[]string{"heartbeat", "not a lease"}, "lease"},
	} {
		r := kobe(t, tt.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("kobe %s: want a refusal naming %q: %s", strings.Join(tt.args, " "), tt.want, r)
		}
	}
	if got := srv.Requests(); len(got) != 0 {
		t.Errorf("refused flags reached the server: %v", got)
	}
}

func TestHeartbeatCommand(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	mustKobe(t, "lease", "ci-small", "--heartbeat-timeout", "2m", "--alias", "hb")
	r := mustKobe(t, "heartbeat", "hb")
	if !strings.Contains(r.stdout, "Lease lease-000000000001 is alive until") {
		t.Errorf("stdout: %s", r)
	}
	mustKobe(t, "lease", "ci-small", "--alias", "plain")
	r = kobe(t, "heartbeat", "plain")
	if r.code != 1 || !strings.Contains(r.stderr, wire.ReasonHeartbeatNotEnabled) && !strings.Contains(r.stderr, "without heartbeat_timeout") {
		t.Errorf("heartbeat of a lease without a timeout: want a refusal that says why: %s", r)
	}
	mustKobe(t, "release", "hb")
	r = kobe(t, "heartbeat", "lease-000000000001")
	if r.code != 1 || !strings.Contains(r.stderr, "ended") {
		t.Errorf("heartbeat of a released lease: want a refusal that says it ended: %s", r)
	}
}

func TestRunSendsHeartbeats(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t)
	e.withServer(t, srv)
	// The command outlives two beats of a 10s timeout (one every 1.67s).
	r := kobe(t, "run", "ci-small", "--heartbeat-timeout", "10s", "--", "sh", "-c", "sleep 4")
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	if got := srv.Heartbeats(); len(got) < 2 {
		t.Errorf("heartbeats while the command ran = %v, want at least 2", got)
	}
	mustKobe(t, "run", "ci-small", "--", "true")
	if l, _ := srv.Lease("lease-000000000002"); l.HeartbeatTimeout != "5m" {
		t.Errorf("kobe run asked for heartbeat_timeout %q by default, want 5m", l.HeartbeatTimeout)
	}
	mustKobe(t, "run", "ci-small", "--heartbeat-timeout", "0", "--", "true")
	if l, _ := srv.Lease("lease-000000000003"); l.HeartbeatTimeout != "" {
		t.Errorf("--heartbeat-timeout 0 asked for %q, want none", l.HeartbeatTimeout)
	}
}

// A lease with heartbeat and idle timeouts says both in kobe lease's
// comments, so that whoever evals the output learns how it may end early.
func TestLeasePrintsItsEarlyEnds(t *testing.T) {
	e := newTestEnv(t)
	srv := apiclienttest.New(t, apiclienttest.WithIdleTimeout(30*time.Minute))
	e.withServer(t, srv)
	r := mustKobe(t, "lease", "ci-small", "--heartbeat-timeout", "2m")
	for _, want := range []string{
		"# Ends 2m after its last heartbeat (next: by ",
		"kobe heartbeat lease-000000000001).",
		"# Ends when unused for 30m (no request through kobe's connect proxy; next: by ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q: %s", want, r)
		}
	}
}
