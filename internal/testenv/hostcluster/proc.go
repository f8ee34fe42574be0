package hostcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopTimeout is how long a process has to exit after SIGTERM before it
// gets SIGKILL (an API server once ignored SIGTERM).
const stopTimeout = 10 * time.Second

// startProcess starts bin with args, its output appended to
// <dir>/logs/<name>.log, and records its PID in <dir>/pids/<name> so that a
// teardown after a crash finds it. The kernel kills it with SIGKILL when the
// test process dies.
func startProcess(dir, name, bin string, args, env []string) (*exec.Cmd, error) {
	logDir, pidDir := filepath.Join(dir, "logs"), filepath.Join(dir, "pids")
	for _, d := range []string{logDir, pidDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	logf, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(pidDir, name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	return cmd, nil
}

// stopRecorded stops every process whose PID is recorded under <dir>/pids,
// in the reverse of the order given (then any others), and removes the
// records. A PID is signalled only while its command line still names dir
// or the binary it was started from, so a PID the kernel handed to another
// process since a crash is left alone.
func stopRecorded(dir string, order []string) error {
	pidDir := filepath.Join(dir, "pids")
	entries, err := os.ReadDir(pidDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	seen := map[string]bool{}
	for i := len(order) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(pidDir, order[i])); err == nil {
			names = append(names, order[i])
			seen[order[i]] = true
		}
	}
	for _, e := range entries {
		if !seen[e.Name()] {
			names = append(names, e.Name())
		}
	}
	var errs []error
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(pidDir, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && ownedBy(pid, dir, name) {
			if err := stopPID(pid); err != nil {
				errs = append(errs, fmt.Errorf("stopping %s (pid %d): %w", name, pid, err))
				continue
			}
		}
		if err := os.Remove(filepath.Join(pidDir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownedBy tells whether pid is still a process this package started for
// dir: its command line names dir or a binary called name.
func ownedBy(pid int, dir, name string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if len(args) > 0 && filepath.Base(string(args[0])) == name {
		return true
	}
	return bytes.Contains(cmdline, []byte(dir))
}

// stopPID sends SIGTERM, waits up to stopTimeout, then sends SIGKILL and
// waits for the process to be gone.
func stopPID(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
	if waitGone(pid, stopTimeout) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	if !waitGone(pid, stopTimeout) {
		return fmt.Errorf("pid %d still running after SIGKILL (%s)", pid, processState(pid))
	}
	return nil
}

// processState says what a process that outlives SIGKILL is doing: its
// name, state (D: in the kernel, uninterruptible), where it waits, and its
// cgroup (a frozen or CPU-throttled pod cgroup delays its exit).
func processState(pid int) string {
	read := func(name string) string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	state := "?"
	for line := range strings.SplitSeq(read("status"), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			state = strings.TrimSpace(v)
		}
	}
	cgroup, _, _ := strings.Cut(read("cgroup"), "\n")
	return fmt.Sprintf("comm %s, state %s, wchan %s, cgroup %s", read("comm"), state, read("wchan"), cgroup)
}

// waitGone waits until pid has exited (or is a zombie) or d has passed.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		// The state is the field after the parenthesised command name.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs a command to completion (at most a minute) and returns its
// combined output; the error names the command and carries the output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
