package memberproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
)

// Process is a running process.
type Process struct {
	PID int
	// Cmdline is the command line, arguments separated by spaces.
	Cmdline string
}

func (p Process) String() string {
	c := p.Cmdline
	if len(c) > 100 {
		c = c[:100] + "..."
	}
	return fmt.Sprintf("%d %s", p.PID, c)
}

// Running lists the live processes (zombies and this process excluded)
// whose command line contains s: a member's data directory, a state
// directory, a member's UID.
func Running(s string) ([]Process, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("reading /proc: %w", err)
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// A process may end between ReadDir and these reads: skip it.
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		if zombie(pid) {
			continue
		}
		out = append(out, Process{PID: pid, Cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))})
	}
	return out, nil
}

// zombie reports whether pid has exited and waits only to be reaped (or is
// gone already).
func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// Kill sends SIGKILL to every process of ps, for a test's clean-up after
// it found processes left behind.
func Kill(ps []Process) {
	for _, p := range ps {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}

// Dirs lists the names of the member data directories under root (none when
// root does not exist).
func Dirs(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root, err)
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, nil
}

// NameMarker is what a member's data directory name, and so every path and
// command line under it, holds of the member's namespace and name:
// <namespace>_<name>_. Matching on the bare name would take pool-dev-3 for
// pool-dev-35 (names hold no "_", so the marker is exact).
func NameMarker(namespace, name string) string {
	return namespace + "_" + name + "_"
}

// Dir is the data directory of the member with uid under root: the local
// backend names it <namespace>_<name>_<uid>.
func Dir(root string, uid types.UID) (string, error) {
	names, err := Dirs(root)
	if err != nil {
		return "", err
	}
	for _, n := range names {
		if strings.HasSuffix(n, "_"+string(uid)) {
			return filepath.Join(root, n), nil
		}
	}
	return "", fmt.Errorf("no data directory for member %s in %s (%v)", uid, root, names)
}

// Components reads the member's state file in dir and returns the pid of
// each component the local backend started (etcd, kube-apiserver, ...).
func Components(dir string) (map[string]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("reading member state: %w", err)
	}
	var st struct {
		Processes []struct {
			Component string `json:"component"`
			PID       int    `json:"pid"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parsing member state %s: %w", dir, err)
	}
	out := make(map[string]int, len(st.Processes))
	for _, p := range st.Processes {
		out[p.Component] = p.PID
	}
	return out, nil
}
