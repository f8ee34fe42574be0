package local

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// niceOf reads the niceness of process pid (field 19 of /proc/pid/stat;
// the command name, field 2, may hold spaces, so fields are counted after
// its closing parenthesis).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	n, err := readNice(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readNice(pid int) (int, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 17 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, raw)
	}
	return strconv.Atoi(fields[16]) // field 19: the 17th after the name
}

// TestStartNiced: a child started with a niceness runs at it from the
// start, its own children too; this process's threads keep theirs.
func TestStartNiced(t *testing.T) {
	own := niceOf(t, os.Getpid())
	for _, tc := range []struct{ nice, want int }{{0, own}, {7, min(own+7, maxNice)}, {40, maxNice}} {
		// sh starts a child of its own and reports both niceness values.
		cmd := exec.Command("/bin/sh", "-c", `sleep 5 & echo $!; wait`)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := startNiced(cmd, tc.nice); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		grandchild, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatal(err)
		}
		if got := niceOf(t, cmd.Process.Pid); got != tc.want {
			t.Errorf("nice %d: the child runs at %d, want %d", tc.nice, got, tc.want)
		}
		if got := niceOf(t, grandchild); got != tc.want {
			t.Errorf("nice %d: the child's child runs at %d, want %d", tc.nice, got, tc.want)
		}
		_ = cmd.Process.Kill()
		_ = exec.Command("kill", strconv.Itoa(grandchild)).Run()
		_ = cmd.Wait()
		// No thread of this process is left at the child's priority (the
		// one that started it ends a moment after its goroutine).
		testenv.Eventually(t, 5*time.Second, "this process's threads at their own priority", func() error {
			tasks, err := os.ReadDir("/proc/self/task")
			if err != nil {
				return err
			}
			for _, task := range tasks {
				tid, _ := strconv.Atoi(task.Name())
				if got, err := readNice(tid); err == nil && got != own {
					return fmt.Errorf("thread %d runs at %d, the process at %d", tid, got, own)
				}
			}
			return nil
		})
	}
}
