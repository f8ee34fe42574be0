package node

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A node's kubelet and containerd take inotify instances of the machine's
// root user (about eight a node; a member's API server takes four more),
// and fs.inotify.max_user_instances, 128 on most distributions, is one
// count for every root process of the machine: about nine members with a
// node reach it, and the next kubelet exits at start ("Failed to start
// cAdvisor: inotify_init: too many open files", the kubelet exits that
// issue 42 saw while members churned). A lease holder's pods run as that
// same root and could take every instance on purpose.
//
// The kernel charges each instance (about 1 KiB) and each watch (about
// 90 B) to the memory cgroup of the process that makes it, so counts that
// no cgroup's memory can reach leave the member's memory limit as the
// bound: a member at its limit fails inside itself, and the machine's
// other processes still get instances. inotifyFloors are those counts.

// inotifySysctls are the settings raiseInotifyLimits may raise, under
// /proc/sys.
var inotifySysctls = []string{"fs/inotify/max_user_instances", "fs/inotify/max_user_watches"}

// InotifySysctls are the machine-wide settings a node of the local backend
// may raise (a test that starts nodes restores them at its end).
func InotifySysctls() []string { return append([]string(nil), inotifySysctls...) }

// inotifyFloors are the lowest values of inotifySysctls at which the
// memory of a machine with memTotal bytes runs out before either count:
// an instance costs at least 512 bytes, a watch at least 64.
func inotifyFloors(memTotal int64) map[string]int64 {
	return map[string]int64{
		inotifySysctls[0]: min(memTotal/512, 1<<31-1),
		inotifySysctls[1]: min(memTotal/64, 1<<31-1),
	}
}

// InotifyFloors are inotifyFloors for this machine's memory, by setting
// under /proc/sys (InotifySysctls): what a host administrator sets for
// node pods, which never change their host's settings.
func InotifyFloors() (map[string]int64, error) {
	memTotal, err := readMemTotal("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	return inotifyFloors(memTotal), nil
}

// raiseInotifyLimits raises each of inotifySysctls to its floor (never
// lowers one) and says what it changed, for the node's log.
func raiseInotifyLimits() (string, error) {
	floors, err := InotifyFloors()
	if err != nil {
		return "", err
	}
	var raised []string
	for k, floor := range floors {
		now, err := readSysctlInt(k)
		if err != nil {
			return "", err
		}
		if now >= floor {
			continue
		}
		if err := writeSysctl(k, strconv.FormatInt(floor, 10)); err != nil {
			return "", err
		}
		raised = append(raised, fmt.Sprintf("%s %d -> %d", sysctlName(k), now, floor))
	}
	if len(raised) == 0 {
		return "the machine's inotify limits are beyond what its memory allows", nil
	}
	return "raised the machine's inotify limits to what its memory allows (each member's memory limit bounds its share): " + strings.Join(raised, ", "), nil
}

// inotifyNote says, for a node pod's log, whether its host's inotify
// limits are below their floors: a node pod never changes its host's
// kernel settings, so its host's administrator raises them.
func inotifyNote() string {
	floors, err := InotifyFloors()
	if err != nil {
		return "inotify limits unknown: " + err.Error()
	}
	var low []string
	for k, floor := range floors {
		if now, err := readSysctlInt(k); err == nil && now < floor {
			low = append(low, fmt.Sprintf("%s=%d (at least %d suits this machine's memory)", sysctlName(k), now, floor))
		}
	}
	if len(low) == 0 {
		return "the host's inotify limits are beyond what its memory allows"
	}
	return "the host's inotify limits are low, and its kubelets fail once they are reached: " + strings.Join(low, ", ")
}

func readSysctlInt(k string) (int64, error) {
	b, err := os.ReadFile("/proc/sys/" + k)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", sysctlName(k), err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", sysctlName(k), err)
	}
	return v, nil
}

func sysctlName(k string) string { return strings.ReplaceAll(k, "/", ".") }

// readMemTotal is MemTotal of a /proc/meminfo file, in bytes.
func readMemTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: MemTotal: %w", path, err)
			}
			return kb << 10, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New(path + " has no MemTotal in kB")
}
