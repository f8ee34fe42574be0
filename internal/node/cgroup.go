package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hierarchy is one mounted cgroup hierarchy.
type hierarchy struct {
	// mount is where it is mounted (/sys/fs/cgroup/memory).
	mount string
	// controllers are its super options (memory; name=systemd); empty for
	// cgroup2.
	controllers string
	// v2 is true for the unified hierarchy.
	v2 bool
}

// hierarchies lists the cgroup hierarchies mounted in this mount namespace,
// one mount per hierarchy.
func hierarchies() ([]hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []hierarchy
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || pf[3] != "/" {
			continue
		}
		var h hierarchy
		switch qf[0] {
		case "cgroup2":
			h = hierarchy{mount: pf[4], v2: true}
		case "cgroup":
			var ctrls []string
			for o := range strings.SplitSeq(qf[2], ",") {
				if o != "rw" && o != "ro" && !strings.HasPrefix(o, "release_agent") && o != "clone_children" && o != "noprefix" && o != "xattr" {
					ctrls = append(ctrls, o)
				}
			}
			h = hierarchy{mount: pf[4], controllers: strings.Join(ctrls, ",")}
		default:
			continue
		}
		key := h.controllers
		if h.v2 {
			key = "cgroup2"
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, h)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return out, nil
}

func (h hierarchy) isCpuset() bool {
	return !h.v2 && slices.Contains(strings.Split(h.controllers, ","), "cpuset")
}

// createCgroup creates rel (a clean relative path) in every hierarchy. In
// the cpuset hierarchy each new level gets its parent's cpus and mems, or
// no task could join it. A parent removed meanwhile (the host removes an
// empty "kobe" when its last member goes) is created again.
func createCgroup(rel string) error {
	var err error
	for range 5 {
		if err = createCgroupOnce(rel); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

func createCgroupOnce(rel string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := h.mount
		for part := range strings.SplitSeq(rel, "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
			if h.isCpuset() {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					cur, _ := os.ReadFile(filepath.Join(dir, f))
					if strings.TrimSpace(string(cur)) != "" {
						continue
					}
					v, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("initialising %s: %w", filepath.Join(dir, f), err)
					}
				}
			}
		}
	}
	return nil
}

// joinCgroup moves pid into rel in every hierarchy.
func joinCgroup(rel string, pid int) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		f := filepath.Join(h.mount, rel, "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("joining %s: %w", f, err)
		}
	}
	return nil
}

// ownCgroup returns this process's cgroup path in the cpu hierarchy (or
// the unified one when there is no cpu controller), for node pods.
func ownCgroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	unified := ""
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "cpu") {
			return parts[2], nil
		}
	}
	if unified != "" {
		return unified, nil
	}
	return "", errors.New("no cpu or unified cgroup in /proc/self/cgroup")
}

// cgroupPids lists the pids in rel and below, in every hierarchy.
func cgroupPids(rel string) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, h := range hs {
		root := filepath.Join(h.mount, rel)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			for f := range strings.FieldsSeq(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// validRel rejects cgroup paths that are not clean relative paths.
func validRel(rel string) error {
	if rel == "" || filepath.IsAbs(rel) || filepath.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("cgroup %q is not a clean relative path", rel)
	}
	return nil
}

// KillCgroup sends SIGKILL to every process in the cgroup rel (relative to
// every hierarchy's root) and its children, except the caller, until none
// is left or ctx ends. A cgroup that does not exist has nothing to kill.
func KillCgroup(ctx context.Context, rel string) error {
	return killCgroupExcept(ctx, rel, nil)
}

func killCgroupExcept(ctx context.Context, rel string, keep []int) error {
	if err := validRel(rel); err != nil {
		return err
	}
	self := os.Getpid()
	for {
		pids, err := cgroupPids(rel)
		if err != nil {
			return err
		}
		left := 0
		for _, pid := range pids {
			if pid == self || slices.Contains(keep, pid) {
				continue
			}
			left++
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("killing pid %d of cgroup %s: %w", pid, rel, err)
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d process(es) left in cgroup %s: %w", left, rel, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RemoveCgroup removes the cgroup rel and every cgroup below it in every
// hierarchy, deepest first, retrying for a few seconds while the kernel
// still counts exited processes in one. Missing cgroups are fine.
func RemoveCgroup(rel string) error {
	if err := validRel(rel); err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h.mount, rel)
		var dirs []string
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Deepest first: a longer path is never a parent of a shorter one.
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			if err := rmdirRetry(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveEmptyCgroup removes the cgroup rel in every hierarchy where it has
// no children and no processes left; elsewhere it is kept.
func RemoveEmptyCgroup(rel string) error {
	if err := validRel(rel); err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		err := syscall.Rmdir(filepath.Join(h.mount, rel))
		if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
			return fmt.Errorf("removing cgroup %s: %w", filepath.Join(h.mount, rel), err)
		}
	}
	return nil
}

func rmdirRetry(dir string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CgroupPaths lists where the cgroup rel exists on this host, in every
// hierarchy (none once RemoveCgroup succeeded): a verified teardown proves
// it empty.
func CgroupPaths(rel string) ([]string, error) {
	if err := validRel(rel); err != nil {
		return nil, err
	}
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hs {
		p := filepath.Join(h.mount, rel)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("checking cgroup %s: %w", p, err)
		}
	}
	return out, nil
}

// UnifiedCgroup is the path of the cgroup rel in the cgroup2 hierarchy
// (pure v2, or the unified hierarchy of a hybrid host), whether or not it
// exists; an error when no cgroup2 hierarchy is mounted.
func UnifiedCgroup(rel string) (string, error) {
	if err := validRel(rel); err != nil {
		return "", err
	}
	hs, err := hierarchies()
	if err != nil {
		return "", err
	}
	for _, h := range hs {
		if h.v2 {
			return filepath.Join(h.mount, rel), nil
		}
	}
	return "", errors.New("no cgroup2 hierarchy is mounted: members cannot be frozen")
}

// CreateCgroup creates the cgroup rel (a clean relative path) in every
// hierarchy, parents included.
func CreateCgroup(rel string) error {
	if err := validRel(rel); err != nil {
		return err
	}
	return createCgroup(rel)
}

// JoinCgroup moves pid into the cgroup rel in every hierarchy.
func JoinCgroup(rel string, pid int) error {
	if err := validRel(rel); err != nil {
		return err
	}
	return joinCgroup(rel, pid)
}

// CgroupLimits are the kernel's bounds on a cgroup and all below it; zero
// fields are left as they are.
type CgroupLimits struct {
	// MemoryBytes: past it the kernel reclaims, then OOM-kills a process
	// of the cgroup, never one outside it.
	MemoryBytes int64
	// Pids bounds the tasks (processes and threads): past it fork and
	// clone fail with EAGAIN inside the cgroup.
	Pids int64
}

// LimitCgroup writes limits on the cgroup rel, which must exist, in the
// hierarchies that have the controllers (memory and pids, cgroup v1 or
// v2). A limit that no mounted hierarchy can enforce is an error: a member
// must never run unbounded while its pool says it is bounded.
func LimitCgroup(rel string, l CgroupLimits) error {
	if err := validRel(rel); err != nil {
		return err
	}
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	memSet, pidsSet := l.MemoryBytes <= 0, l.Pids <= 0
	for _, h := range hs {
		dir := filepath.Join(h.mount, rel)
		if h.v2 {
			ok, err := limitUnified(h.mount, rel, l)
			if err != nil {
				return err
			}
			memSet, pidsSet = memSet || ok["memory"], pidsSet || ok["pids"]
			continue
		}
		ctrls := strings.Split(h.controllers, ",")
		if l.MemoryBytes > 0 && slices.Contains(ctrls, "memory") {
			if err := writeCgroupFile(dir, "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return err
			}
			memSet = true
		}
		if l.Pids > 0 && slices.Contains(ctrls, "pids") {
			if err := writeCgroupFile(dir, "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
				return err
			}
			pidsSet = true
		}
	}
	switch {
	case !memSet:
		return errors.New("no mounted cgroup hierarchy has the memory controller: a memory limit cannot be enforced")
	case !pidsSet:
		return errors.New("no mounted cgroup hierarchy has the pids controller: a process limit cannot be enforced")
	}
	return nil
}

// limitUnified writes the limits in the cgroup2 hierarchy mounted at
// mount, for the controllers its root offers (none on a hybrid host whose
// v1 hierarchies hold them): each is enabled for the children of every
// ancestor of rel first, as cgroup v2 requires. It reports which it set.
func limitUnified(mount, rel string, l CgroupLimits) (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("reading %s/cgroup.controllers: %w", mount, err)
	}
	offered := strings.Fields(string(data))
	set := map[string]bool{}
	for _, w := range []struct {
		ctrl, file string
		v          int64
	}{{"memory", "memory.max", l.MemoryBytes}, {"pids", "pids.max", l.Pids}} {
		if w.v <= 0 || !slices.Contains(offered, w.ctrl) {
			continue
		}
		dir := mount
		for part := range strings.SplitSeq(rel, "/") {
			if err := writeCgroupFile(dir, "cgroup.subtree_control", "+"+w.ctrl); err != nil {
				return nil, err
			}
			dir = filepath.Join(dir, part)
		}
		if err := writeCgroupFile(dir, w.file, strconv.FormatInt(w.v, 10)); err != nil {
			return nil, err
		}
		set[w.ctrl] = true
	}
	return set, nil
}

func writeCgroupFile(dir, file, v string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644); err != nil {
		return fmt.Errorf("writing %s to %s: %w", v, filepath.Join(dir, file), err)
	}
	return nil
}
