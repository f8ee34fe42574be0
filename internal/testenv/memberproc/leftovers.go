package memberproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// UIDsOf are the member UIDs of the member directory names (Dirs), file
// system images (<dir>.disk) left out.
func UIDsOf(names []string) []string {
	var out []string
	for _, n := range names {
		if i := strings.LastIndexByte(n, '_'); i >= 0 && !strings.HasSuffix(n, ".disk") {
			out = append(out, n[i+1:])
		}
	}
	return out
}

// Left lists what the members of uids left on the machine beyond
// processes and directories: cgroups, control-plane fences (nftables) and
// mounts under state. Only root makes any.
func Left(state string, uids []string) []string {
	var left []string
	for _, uid := range uids {
		if m, _ := filepath.Glob("/sys/fs/cgroup/*/kobe/" + uid); len(m) > 0 {
			left = append(left, m...)
		}
		if out, err := exec.Command("nft", "list", "table", "inet", "kobe-cp-"+uid).CombinedOutput(); err == nil {
			left = append(left, "nftables table kobe-cp-"+uid+": "+strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for l := range strings.SplitSeq(string(mounts), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], state+"/") {
				left = append(left, "mount "+f[4])
			}
		}
	}
	return left
}

// Bridges lists the member bridges (kbm*) on the machine, to compare
// before and after a run.
func Bridges() []string {
	out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	if err != nil {
		return nil
	}
	var names []string
	for l := range strings.SplitSeq(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "kbm") {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	return names
}
