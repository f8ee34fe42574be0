// Package nodetest tests local members with real nodes against real
// processes (root only), and holds the checks that nothing of a destroyed
// member is left on the host, for the end-to-end tests to share.
package nodetest

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kunobi-ninja/kobe/internal/node"
)

// MemberLeaks lists what is left on the host of a destroyed member with
// nodes: processes whose command line names memberDir or whose cgroup is
// the member's (kobe/<uid>), links of its network slot, its nftables table,
// its cgroup directories in any hierarchy, mounts under memberDir, and
// memberDir itself. Empty means nothing is left.
func MemberLeaks(memberDir, uid string, slot int) []string {
	var leaks []string
	cg := "/kobe/" + uid
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cgroups, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(args, memberDir) || cgroupUnder(string(cgroups), cg) {
			leaks = append(leaks, fmt.Sprintf("process %d: %s", pid, strings.TrimSpace(args)))
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show").Output(); err == nil {
		bridge := node.BridgeName(slot)
		for line := range strings.SplitSeq(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if name == bridge || strings.HasPrefix(name, bridge+"n") {
				leaks = append(leaks, "link "+name)
			}
		}
	} else {
		leaks = append(leaks, "listing links: "+err.Error())
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for line := range strings.SplitSeq(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[2] == node.TableName(slot) {
				leaks = append(leaks, "nftables table "+strings.Join(f[1:], " "))
			}
		}
	} else {
		leaks = append(leaks, "listing nftables tables: "+err.Error())
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range append(hier, "/sys/fs/cgroup") {
		d := filepath.Join(h, "kobe", uid)
		if _, err := os.Stat(d); err == nil {
			leaks = append(leaks, "cgroup "+d)
		}
	}
	for _, mp := range MountsUnder(memberDir) {
		leaks = append(leaks, "mount "+mp)
	}
	if _, err := os.Stat(memberDir); !errors.Is(err, fs.ErrNotExist) {
		leaks = append(leaks, "directory "+memberDir)
	}
	return leaks
}

func cgroupUnder(procCgroup, cg string) bool {
	for line := range strings.SplitSeq(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == cg || strings.HasPrefix(parts[2], cg+"/")) {
			return true
		}
	}
	return false
}

// MountsUnder lists the mount points at or under dir in this process's
// mount namespace.
func MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return []string{"reading mountinfo: " + err.Error()}
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// KubeletSysctls are the machine-wide settings kubelet (and kobe-node: its
// inotify limits) may change; a test that starts nodes saves them first and
// restores them at the end.
var KubeletSysctls = append([]string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}, node.InotifySysctls()...)

// SaveSysctls reads KubeletSysctls and returns a function that writes
// them back.
func SaveSysctls() (restore func() error, err error) {
	saved := map[string][]byte{}
	for _, k := range KubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return nil, err
		}
		saved[k] = v
	}
	return func() error {
		var errs []error
		for k, v := range saved {
			if err := os.WriteFile("/proc/sys/"+k, v, 0o644); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}, nil
}
