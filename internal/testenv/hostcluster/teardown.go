package hostcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Names and ranges the host cluster owns (the other halves, 198.18.128.0/17
// and 198.19.128.0/17, are local members' nodes: internal/node/hostnet.go). Teardown removes exactly these,
// so nothing else on the machine (another CI run's processes, its
// networking) is touched. Both ranges are inside 198.18.0.0/15 (reserved for
// benchmarks), never in 10/8, 172.16/12 or 192.168/16.
const (
	// PodCIDR is routed as unreachable: a packet for a pod address that no
	// pod has must not follow the default route off the machine.
	PodCIDR = "198.18.0.0/17"
	// NodePodCIDR is the node's own pod subnet on PodBridge; more specific
	// than PodCIDR, so pods on it are reached.
	NodePodCIDR = "198.18.0.0/24"
	// ServiceCIDR is routed into ServiceBridge, an empty bridge: the host's
	// own connections to a ClusterIP need a route before kube-proxy's DNAT,
	// and packets for an unassigned ClusterIP go nowhere.
	ServiceCIDR = "198.19.0.0/17"
	// PodBridge is the CNI bridge plugin's bridge; ServiceBridge the empty
	// bridge the Service range is routed into.
	PodBridge     = "kobe-cni0"
	ServiceBridge = "kobe-svc0"
	// CNINetwork is the name of the CNI network (and of libcni's cache
	// files, /var/lib/cni/results/<network>-*).
	CNINetwork = "kobe-host"
	// EgressChain is the iptables chain (filter table, jumped to from
	// FORWARD) that drops pods' packets bound off the machine.
	EgressChain = "KOBE-HOST-EGRESS"
	// DefaultDir holds all of the host cluster's state, and the records
	// (PIDs, sysctls, created paths) a teardown after a crash needs.
	DefaultDir = "/var/tmp/kobe-hostcluster"
)

// changedSysctls are the sysctls kubelet (kernel.panic_on_oops,
// kernel.panic, vm.overcommit_memory) and the CNI bridge plugin
// (net.ipv4.ip_forward) set; Start records them and Teardown restores them.
var changedSysctls = []string{
	"kernel.panic_on_oops",
	"kernel.panic",
	"vm.overcommit_memory",
	"net.ipv4.ip_forward",
}

// hostPaths are the paths outside the state directory that kubelet,
// containerd and libcni write whatever their configuration. Start records
// which of them do not exist yet; Teardown removes only those.
var hostPaths = []string{
	"/var/lib/kubelet",
	"/var/log/containers",
	"/var/log/pods",
	"/run/containerd",
	"/run/netns",
	"/var/lib/cni",
	"/run/mount",
}

// cgroupDirs are the cgroup directories (relative to each hierarchy) that
// kubelet with the cgroupfs driver and containerd create.
var cgroupDirs = []string{"kubepods", "kubepods.slice", "k8s.io"}

// processOrder is the order the host cluster starts its processes in;
// they are stopped in reverse.
var processOrder = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd", "kubelet", "kube-proxy"}

const (
	sysctlRecord = "sysctls.json"
	pathsRecord  = "created-paths.json"
)

// Teardown removes everything a host cluster with state directory dir left
// on the machine, running or crashed: it is idempotent, and Start runs it
// first. In order: the processes it recorded (SIGTERM, SIGKILL after
// stopTimeout), containerd's shims and the pods' processes, mounts (lazily
// detached), network namespaces, the bridges, veths and routes, the
// iptables/nftables rules and chains of kube-proxy, kubelet and the CNI
// plugins, cgroups, sysctls, the host paths it created, then dir.
//
// Teardown waits (up to lockTimeout) for a running host cluster of dir to
// stop: the lock that New takes keeps one run from tearing down another's
// cluster.
func Teardown(ctx context.Context, dir string) error {
	unlock, err := lock(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	return teardown(ctx, dir)
}

// lockTimeout is how long New and Teardown wait for another process's host
// cluster of the same directory to stop.
const lockTimeout = 15 * time.Minute

// lock takes an exclusive flock on <dir>.lock, waiting while another
// process holds it; the kernel releases it when that process dies. The
// returned func releases it.
func lock(ctx context.Context, dir string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s.lock: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("another process's host cluster holds %s.lock: %w", dir, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// teardown is Teardown for a caller that holds the lock.
func teardown(ctx context.Context, dir string) error {
	var errs []error
	step := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	step("stopping processes", stopRecorded(dir, processOrder))
	step("stopping shims and pods", killStrays(dir))
	step("unmounting", unmountAll(dir))
	step("removing network namespaces", removeNetns())
	step("removing links and routes", removeNetworking(ctx))
	step("removing rules", removeRules(ctx))
	step("removing cgroups", removeCgroups())
	step("restoring sysctls", restoreSysctls(dir))
	step("removing host paths", removeCreatedPaths(dir))
	if len(errs) == 0 {
		step("removing "+dir, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// strayKillTimeout is how long killStrays waits for each process it killed.
const strayKillTimeout = 30 * time.Second

// killStrays kills what outlives containerd: its shims (whose command
// line names containerd's socket under dir) and the processes in the
// pods' cgroups.
func killStrays(dir string) error {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), dir+"/") {
			pids = append(pids, pid)
		}
	}
	eachPodCgroup(func(path string) {
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	})
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// A frozen process takes SIGKILL only when thawed. runc freezes a
	// container's cgroup while it signals every process in it and thaws it
	// after; a runc or shim killed in between (as above, or by a crash)
	// leaves the cgroup frozen for good, its processes asleep in
	// __refrigerator (seen: an exec probe's etcdctl).
	thawPodCgroups()
	for _, pid := range pids {
		// A process of a pod exits inside its cgroup's CPU quota, which a
		// busy machine stretches: longer than a daemon's stopTimeout.
		if !waitGone(pid, strayKillTimeout) {
			return fmt.Errorf("pid %d still running %s after SIGKILL (%s)", pid, strayKillTimeout, processState(pid))
		}
	}
	return nil
}

// ownMount tells whether a mount point is one the host cluster made.
func ownMount(dir, mp string) bool {
	for _, prefix := range []string{dir + "/", "/run/netns/cni-", "/run/containerd/", "/var/lib/kubelet/"} {
		if strings.HasPrefix(mp, prefix) {
			return true
		}
	}
	return false
}

// unmountAll detaches (umount -l) every mount the host cluster made,
// deepest first.
func unmountAll(dir string) error {
	for range 5 {
		mps, err := mountPoints()
		if err != nil {
			return err
		}
		var own []string
		for _, mp := range mps {
			if ownMount(dir, mp) {
				own = append(own, mp)
			}
		}
		if len(own) == 0 {
			return nil
		}
		sort.Slice(own, func(i, j int) bool { return len(own[i]) > len(own[j]) })
		for _, mp := range own {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("umount -l %s: %w", mp, err)
			}
		}
	}
	return errors.New("mounts remain after 5 rounds of unmounting")
}

// mountPoints lists the mount points of this mount namespace (mountinfo's
// fifth field, octal escapes decoded).
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			mps = append(mps, unescapeMount(fields[4]))
		}
	}
	return mps, sc.Err()
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeNetns removes the network namespace files the CRI made for pods.
func removeNetns() error {
	m, err := filepath.Glob("/run/netns/cni-*")
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range m {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNetworking deletes the veths on PodBridge, both bridges and both
// routes; a missing one is not an error.
func removeNetworking(ctx context.Context) error {
	var errs []error
	if out, err := run(ctx, "ip", "-o", "link", "show", "master", PodBridge); err == nil {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if _, err := run(ctx, "ip", "link", "del", name); err != nil && !gone(err) {
				errs = append(errs, err)
			}
		}
	}
	for _, args := range [][]string{
		{"link", "del", PodBridge},
		{"link", "del", ServiceBridge},
		{"route", "del", "unreachable", PodCIDR},
		{"route", "del", ServiceCIDR},
	} {
		if _, err := run(ctx, "ip", args...); err != nil && !gone(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// gone tells whether an ip(8) error says the object does not exist.
func gone(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Cannot find device") || strings.Contains(s, "No such process") ||
		strings.Contains(s, "does not exist") || strings.Contains(s, "No such device")
}

// ownChain tells whether an iptables chain belongs to kube-proxy, kubelet
// (KUBE-*), the CNI plugins (CNI-*) or the host cluster's egress guard.
func ownChain(c string) bool {
	return strings.HasPrefix(c, "KUBE-") || strings.HasPrefix(c, "CNI-") || c == EgressChain
}

// removeRules deletes, in every iptables and ip6tables table, the rules in
// or jumping to the node's chains and then the chains, through
// iptables-restore --noflush (the way kube-proxy edits its own rules), so
// every other rule stays; then the nftables tables that iptables-nft
// created and that are now empty, and kube-proxy's nftables tables.
func removeRules(ctx context.Context) error {
	var errs []error
	for _, v := range []string{"iptables", "ip6tables"} {
		saved, err := run(ctx, v+"-save")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		script := restoreScript(saved)
		if script == "" {
			continue
		}
		path, err := writeTemp(script)
		if err != nil {
			return err
		}
		if _, err := run(ctx, v+"-restore", "--noflush", path); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(path)
	}
	errs = append(errs, removeEmptyNftTables(ctx))
	return errors.Join(errs...)
}

// restoreScript turns iptables-save output into an iptables-restore script
// that deletes the node's rules and chains, or "" when there are none.
func restoreScript(saved string) string {
	var b strings.Builder
	for _, block := range strings.Split(saved, "\n*")[0:] {
		lines := strings.Split(strings.TrimPrefix(block, "*"), "\n")
		table := ""
		var chains, deletes []string
		for _, l := range lines {
			switch {
			case table == "" && l != "" && !strings.HasPrefix(l, "#"):
				table = l
			case strings.HasPrefix(l, ":"):
				if c := strings.Fields(l[1:]); len(c) > 0 && ownChain(c[0]) {
					chains = append(chains, c[0])
				}
			case strings.HasPrefix(l, "-A "):
				f := strings.Fields(l)
				if ownChain(f[1]) {
					continue // flushed with its chain
				}
				for i := 2; i+1 < len(f); i++ {
					if (f[i] == "-j" || f[i] == "-g") && ownChain(f[i+1]) {
						deletes = append(deletes, "-D"+l[2:])
						break
					}
				}
			}
		}
		if table == "" || (len(chains) == 0 && len(deletes) == 0) {
			continue
		}
		fmt.Fprintf(&b, "*%s\n", table)
		for _, d := range deletes {
			b.WriteString(d + "\n")
		}
		for _, c := range chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		for _, c := range chains {
			fmt.Fprintf(&b, "-X %s\n", c)
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

func writeTemp(s string) (string, error) {
	f, err := os.CreateTemp("", "kobe-hostcluster-rules-*")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return f.Name(), err
}

// removeEmptyNftTables deletes the ip/ip6 tables of the iptables-nft
// names that hold no rule (left behind once the node's rules are gone;
// an empty table filters nothing), and kube-proxy's own tables.
func removeEmptyNftTables(ctx context.Context) error {
	out, err := run(ctx, "nft", "list", "tables")
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line) // table <family> <name>
		if len(f) != 3 || (f[1] != "ip" && f[1] != "ip6") {
			continue
		}
		switch f[2] {
		case "kube-proxy":
		case "filter", "nat", "mangle", "raw", "security":
			body, err := run(ctx, "nft", "list", "table", f[1], f[2])
			if err != nil || nftHasRules(body) {
				continue
			}
		default:
			continue
		}
		if _, err := run(ctx, "nft", "delete", "table", f[1], f[2]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// nftHasRules tells whether `nft list table` output holds a rule: a line
// that is not a table or chain header, a base-chain hook line or a brace.
func nftHasRules(body string) bool {
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "", l == "}", strings.HasPrefix(l, "table "), strings.HasPrefix(l, "chain "), strings.HasPrefix(l, "type "):
		default:
			return true
		}
	}
	return false
}

// thawPodCgroups thaws every cgroup under the pods' cgroup directories:
// freezer.state in the v1 freezer hierarchy, cgroup.freeze in v2. Errors
// are left to the caller's wait, which names a process still stuck.
func thawPodCgroups() {
	eachPodCgroup(func(path string) {
		for file, thawed := range map[string]string{"freezer.state": "THAWED", "cgroup.freeze": "0"} {
			if _, err := os.Stat(filepath.Join(path, file)); err == nil {
				_ = os.WriteFile(filepath.Join(path, file), []byte(thawed), 0o644)
			}
		}
	})
}

// eachPodCgroup calls f with every cgroup directory under the pods'
// cgroup directories (cgroupDirs) of every hierarchy, parents first.
func eachPodCgroup(f func(path string)) {
	for _, root := range cgroupRoots() {
		for _, d := range cgroupDirs {
			_ = filepath.WalkDir(filepath.Join(root, d), func(path string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					f(path)
				}
				return nil
			})
		}
	}
}

// cgroupRoots are the mounted cgroup hierarchies (v1 controllers, and the
// v2 "unified" one of a hybrid setup).
func cgroupRoots() []string {
	var roots []string
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if st, err := os.Lstat(p); err == nil && st.IsDir() {
			roots = append(roots, p)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		roots = append(roots, "/sys/fs/cgroup") // pure v2
	}
	return roots
}

// removeCgroups removes the node's cgroup directories in every hierarchy,
// children first (a cgroup is removed with rmdir once it has no process).
func removeCgroups() error {
	var errs []error
	for _, root := range cgroupRoots() {
		for _, d := range cgroupDirs {
			top := filepath.Join(root, d)
			if _, err := os.Stat(top); err != nil {
				continue
			}
			var dirs []string
			_ = filepath.WalkDir(top, func(path string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
			for _, p := range dirs {
				if err := rmdirRetry(p); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup directory, retrying while the kernel still
// reports it busy (processes just killed take a moment to leave it).
func rmdirRetry(p string) error {
	var err error
	for range 50 {
		err = syscall.Rmdir(p)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("rmdir %s: %w", p, err)
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

func readSysctl(key string) (string, error) {
	b, err := os.ReadFile(sysctlPath(key))
	return strings.TrimSpace(string(b)), err
}

// recordHostState writes, unless a crashed run's record is there already
// (which holds the values from before that run), the sysctls Teardown
// restores and the host paths that do not exist yet.
func recordHostState(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, sysctlRecord)); errors.Is(err, os.ErrNotExist) {
		vals := map[string]string{}
		for _, k := range changedSysctls {
			v, err := readSysctl(k)
			if err != nil {
				return err
			}
			vals[k] = v
		}
		if err := writeJSON(filepath.Join(dir, sysctlRecord), vals); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, pathsRecord)); errors.Is(err, os.ErrNotExist) {
		var absent []string
		for _, p := range hostPaths {
			if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
				absent = append(absent, p)
			}
		}
		if err := writeJSON(filepath.Join(dir, pathsRecord), absent); err != nil {
			return err
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func readJSON(path string, v any) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, json.Unmarshal(b, v)
}

// restoreSysctls writes back the recorded sysctls.
func restoreSysctls(dir string) error {
	vals := map[string]string{}
	ok, err := readJSON(filepath.Join(dir, sysctlRecord), &vals)
	if err != nil || !ok {
		return err
	}
	var errs []error
	for k, v := range vals {
		if cur, err := readSysctl(k); err == nil && cur == v {
			continue
		}
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("sysctl %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

// removeCreatedPaths removes the host paths that did not exist before the
// host cluster started, and libcni's cache files of its network.
func removeCreatedPaths(dir string) error {
	var absent []string
	if _, err := readJSON(filepath.Join(dir, pathsRecord), &absent); err != nil {
		return err
	}
	var errs []error
	for _, p := range absent {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	cached, _ := filepath.Glob("/var/lib/cni/results/" + CNINetwork + "-*")
	for _, p := range cached {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
