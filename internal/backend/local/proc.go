package local

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// procInfo is what /proc says about one process.
type procInfo struct {
	pid    int
	argv   []string
	zombie bool
	pgid   int
	// startTicks is when the process started, in clock ticks after boot
	// (/proc/<pid>/stat field 22): with the pid it names one process
	// exactly, whatever reuses the pid later.
	startTicks uint64
}

// component is the member component a process runs, from argv[0].
func (p procInfo) component() string {
	if len(p.argv) == 0 {
		return ""
	}
	return filepath.Base(p.argv[0])
}

// references reports whether an argument names dir or a path under it.
func (p procInfo) references(dir string) bool {
	for _, a := range p.argv {
		if i := strings.Index(a, dir); i >= 0 {
			rest := a[i+len(dir):]
			if rest == "" || rest[0] == '/' || rest[0] == ',' {
				return true
			}
		}
	}
	return false
}

// memberDir returns the member data directory under root that p refers to.
func (p procInfo) memberDir(root string) (string, bool) {
	prefix := root + "/"
	for _, a := range p.argv {
		i := strings.Index(a, prefix)
		if i < 0 {
			continue
		}
		name, _, _ := strings.Cut(a[i+len(prefix):], "/")
		if name != "" && name != "." && name != ".." {
			return filepath.Join(root, name), true
		}
	}
	return "", false
}

// isOurs reports whether p is a member component whose command line refers
// to dir: a recycled pid running something else never is.
func (p procInfo) isOurs(dir string) bool {
	return !p.zombie && slices.Contains(knownComponents, p.component()) && p.references(dir)
}

// readProc reads /proc/<pid>; ok is false when the process does not exist.
func readProc(pid int) (procInfo, bool) {
	base := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(base + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	info := procInfo{pid: pid}
	// stat is "pid (comm) S ppid pgrp ...": comm may contain spaces and
	// parentheses, so parse from the last ")".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) >= 3 {
			info.zombie = fields[0] == "Z" || fields[0] == "X"
			info.pgid, _ = strconv.Atoi(fields[2])
		}
		if len(fields) >= 20 {
			info.startTicks, _ = strconv.ParseUint(fields[19], 10, 64)
		}
	}
	cmdline, err := os.ReadFile(base + "/cmdline")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return info, true
	}
	cmdline = bytes.TrimRight(cmdline, "\x00")
	if len(cmdline) > 0 {
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			info.argv = append(info.argv, string(a))
		}
	}
	return info, true
}

// scanProcs returns every process on the host that is a member component
// referring to a path under root.
func scanProcs(root string) ([]procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing /proc: %w", err)
	}
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		info, ok := readProc(pid)
		if ok && info.isOurs(root) {
			out = append(out, info)
		}
	}
	return out, nil
}

// signal sends sig to the process group p leads, or to p alone when it
// leads none.
func signal(p procInfo, sig syscall.Signal) error {
	target := p.pid
	if p.pgid == p.pid {
		target = -p.pid
	}
	err := syscall.Kill(target, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
