//go:build root

package node

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFenceControlPlane: a process of a fenced control-plane cgroup
// connects to its API server's port and to nothing else on this host, as
// an outside process still does.
func TestFenceControlPlane(t *testing.T) {
	api, other := listen(t), listen(t)
	uid := "fence-test-" + strconv.Itoa(os.Getpid())
	rel := "kobe-fence-test-" + strconv.Itoa(os.Getpid()) + "/cp"
	if err := CreateCgroup(rel); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	defer func() {
		_ = UnfenceControlPlane(context.Background(), uid)
		_ = RemoveCgroup(filepath.Dir(rel))
	}()
	if err := FenceControlPlane(ctx, uid, rel, port(api), ""); err != nil {
		t.Fatal(err)
	}
	if got := dialFrom(t, "", other); got != "ok" {
		t.Fatalf("control: a process outside the cgroup cannot reach the listener: %s", got)
	}
	if got := dialFrom(t, rel, api); got != "ok" {
		t.Errorf("the fenced process cannot reach its own API server's port: %s", got)
	}
	if got := dialFrom(t, rel, other); got == "ok" {
		t.Error("the fenced process reached another port of the host's loopback")
	}
	// Unfenced, the same dial goes through: the table was the fence.
	if err := UnfenceControlPlane(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if got := dialFrom(t, rel, other); got != "ok" {
		t.Errorf("unfenced, the process still cannot dial: %s", got)
	}
	if err := UnfenceControlPlane(ctx, uid); err != nil {
		t.Errorf("unfencing twice: %v", err)
	}
}

// TestDialHelper is the process dialFrom starts: it waits for a line on
// stdin (it is in its cgroup then), dials KOBE_FENCE_DIAL and prints ok or
// the error.
func TestDialHelper(t *testing.T) {
	addr := os.Getenv("KOBE_FENCE_DIAL")
	if addr == "" {
		return // run as a test of its own: nothing to do
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		_, _ = os.Stdout.WriteString(err.Error())
		os.Exit(0)
	}
	_ = c.Close()
	_, _ = os.Stdout.WriteString("ok")
	os.Exit(0)
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// dialFrom dials ln from a new process in cgroup rel ("" for this one's).
func dialFrom(t *testing.T, rel string, ln net.Listener) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDialHelper$")
	cmd.Env = append(os.Environ(), "KOBE_FENCE_DIAL="+ln.Addr().String())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if rel != "" {
		if err := JoinCgroup(rel, cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			t.Fatal(err)
		}
	}
	_, _ = stdin.Write([]byte("go\n"))
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the dialing process: %v (%s)", err, out.String())
	}
	return strings.TrimSpace(out.String())
}
