//go:build root

package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLimitCgroup: the limits LimitCgroup writes are the kernel's, for a
// process moved into the cgroup and everything it starts: a shell that
// forks past pids.max is refused, and the memory limit is in place.
func TestLimitCgroup(t *testing.T) {
	rel := "kobe-limit-test-" + strconv.Itoa(os.Getpid()) + "/member"
	if err := CreateCgroup(rel); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = KillCgroup(ctx, rel)
		if err := RemoveCgroup(filepath.Dir(rel)); err != nil {
			t.Error(err)
		}
	}()
	const pids = 16
	if err := LimitCgroup(rel, CgroupLimits{MemoryBytes: 64 << 20, Pids: pids}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes")); err == nil && strings.TrimSpace(string(got)) != strconv.Itoa(64<<20) {
		t.Errorf("memory.limit_in_bytes %q", got)
	}
	// The shell waits for a line, so that it forks only once it is in the
	// cgroup.
	sh := exec.Command("sh", "-c", `read go; n=0; while [ $n -lt 100 ]; do sleep 30 >/dev/null 2>&1 & n=$((n+1)); done; echo done`)
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sh.Stdout, sh.Stderr = &out, &out
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	if err := JoinCgroup(rel, sh.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_, _ = stdin.Write([]byte("go\n"))
	_ = stdin.Close()
	done := make(chan error, 1)
	go func() { done <- sh.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("the shell: %v", err) // a refused fork may end it early; what counts is below
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the shell did not finish")
	}
	left, err := cgroupPids(rel)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) >= pids || len(left) == 0 {
		t.Errorf("%d processes in a cgroup of pids.max %d", len(left), pids)
	}
	if !strings.Contains(strings.ToLower(out.String()), "fork") && !strings.Contains(out.String(), "resource temporarily unavailable") {
		t.Errorf("the shell's forks past pids.max were not refused:\n%s", out.String())
	}
}

// TestLimitCgroupRefusesWhatCannotBeEnforced: a path that is not clean is
// refused before anything is written.
func TestLimitCgroupRefusesWhatCannotBeEnforced(t *testing.T) {
	if err := LimitCgroup("../escape", CgroupLimits{Pids: 10}); err == nil {
		t.Error("a cgroup path out of the hierarchy was accepted")
	}
}
