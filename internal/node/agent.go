package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files under Config.Dir that kobe-node writes.
const (
	LogDir = "logs"
)

// kubeletRoot is kubelet's root directory in the node's mount namespace,
// bound from <Dir>/kubelet.
const kubeletRoot = "/var/lib/kubelet"

// daemonEnv is the environment of the node's daemons: nothing of the
// caller's (it may hold credentials), a PATH with runc, iptables and mount.
// GOGC=50, as the local backend's control plane has: kubelet, kube-proxy,
// containerd and its shims (which inherit it) keep smaller heaps for no
// measurable CPU at a member's rate of change (docs/benchmarks.md).
var daemonEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "GOGC=50"}

// Agent runs one node from its Config (the kobe-node program).
type Agent struct {
	cfg *Config
	log *log.Logger
	// cgroupRoot is kubelet's cgroup root ("/kobe/<uid>/n0").
	cgroupRoot string
	// cgroupRel is where the node's processes live, relative to each
	// hierarchy's root (without the leading "/").
	cgroupRel string
	// nodeIP is the node's address (without prefix).
	nodeIP string
	// images are open archives (opened before the mounts hide anything).
	images []*os.File
	// overlay connects the node pods of a member (pod mode, OverlayKeyFile).
	overlay *overlay

	daemons []*daemon
	exited  chan *daemon
}

type daemon struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// exitErr is why the daemon exited (read after done is closed).
func (d *daemon) exitErr() error {
	if d.err == nil {
		return errors.New("exit status 0")
	}
	return d.err
}

// NewAgent returns an agent for cfg, logging to w.
func NewAgent(cfg *Config, w io.Writer) *Agent {
	return &Agent{cfg: cfg, log: log.New(w, "kobe-node: ", log.LstdFlags|log.Lmicroseconds|log.LUTC), exited: make(chan *daemon, 4)}
}

// Run sets the node up and supervises containerd, kubelet and kube-proxy
// until one of them exits (an error) or ctx ends (SIGTERM: a clean stop).
func (a *Agent) Run(ctx context.Context) error {
	err := a.setUpAndStart(ctx)
	if err == nil {
		a.log.Printf("node %s is running", a.cfg.Name)
		select {
		case <-ctx.Done():
			a.log.Printf("stopping node %s", a.cfg.Name)
		case d := <-a.exited:
			err = fmt.Errorf("%s exited: %w; its log is %s", d.name, d.exitErr(), a.logPath(d.name))
		}
	}
	a.stop()
	return err
}

func (a *Agent) setUpAndStart(ctx context.Context) error {
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"opening images", a.openImages},
		{"joining the node's cgroup", a.cgroups},
		{"mounting the node's file systems", a.mounts},
		{"setting up the network", a.network},
		{"keeping pods' DNS inside the member", a.guardDNS},
		{"starting the egress proxy", a.startEgressProxy},
		{"raising the machine's inotify limits", a.inotifyLimits},
		{"starting containerd", a.containerd},
		{"importing images", a.importImages},
		{"waiting for the member's API server", a.apiServerReady},
		{"starting kubelet", a.kubelet},
		{"starting kube-proxy", a.kubeProxy},
		{"starting the volume provisioner", a.storage},
		{"starting the pod overlay", a.startOverlay},
	}
	for _, s := range steps {
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func (a *Agent) path(elem ...string) string {
	return filepath.Join(append([]string{a.cfg.Dir}, elem...)...)
}

func (a *Agent) logPath(name string) string { return a.path(LogDir, name+".log") }

func (a *Agent) openImages(context.Context) error {
	for _, img := range a.cfg.Images {
		f, err := os.Open(img)
		if err != nil {
			return err
		}
		a.images = append(a.images, f)
	}
	return nil
}

// cgroups puts this process (and so everything it starts) into the node's
// cgroup, or, in a node pod, picks a child of its own cgroup as kubelet's
// root.
func (a *Agent) cgroups(context.Context) error {
	if a.cfg.CgroupParent != "" {
		a.cgroupRel = a.cfg.CgroupParent
		if err := createCgroup(a.cgroupRel); err != nil {
			return err
		}
		if err := joinCgroup(a.cgroupRel, os.Getpid()); err != nil {
			return err
		}
		a.cgroupRoot = "/" + a.cgroupRel
		return a.podsCgroup()
	}
	own, err := ownCgroup()
	if err != nil {
		return err
	}
	a.cgroupRel = strings.TrimPrefix(filepath.Join(own, "node"), "/")
	if err := createCgroup(a.cgroupRel); err != nil {
		return err
	}
	a.cgroupRoot = "/" + a.cgroupRel
	if a.cfg.PidsMax > 0 {
		// Every pod of the node runs below it: a fork past it fails in
		// the pod, whatever the host's kubelet allows the node pod.
		if err := LimitCgroup(a.cgroupRel, CgroupLimits{Pids: a.cfg.PidsMax}); err != nil {
			return fmt.Errorf("limiting the node's processes: %w", err)
		}
	}
	return a.podsCgroup()
}

// podsCgroup puts the node's pods in a cgroup of their own below the
// node's, limited to Config.PodsLimits, when it sets any: a pod that forks
// or allocates without end then meets that limit while kubelet, containerd
// and this agent keep the rest of the node's (a node whose daemons cannot
// fork fails its member).
func (a *Agent) podsCgroup() error {
	l := a.cfg.PodsLimits()
	if l.Pids <= 0 && l.MemoryBytes <= 0 {
		return nil
	}
	rel := a.cgroupRel + "/pods"
	if err := createCgroup(rel); err != nil {
		return err
	}
	if err := LimitCgroup(rel, l); err != nil {
		return fmt.Errorf("limiting the node's pods: %w", err)
	}
	a.cgroupRoot = "/" + rel
	return nil
}

// mounts gives the node private, size-limited /run, /var/lib and /var/log
// (kubelet, libcni and containerd write fixed paths there) and hides
// HideDirs behind empty tmpfs mounts, keeping Dir reachable at its path.
// The mount namespace is private (the caller unshared it and Go made /
// MS_PRIVATE), so nothing here reaches the host.
func (a *Agent) mounts(context.Context) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	dirFd, err := os.Open(a.cfg.Dir)
	if err != nil {
		return err
	}
	defer func() { _ = dirFd.Close() }()
	var before syscall.Stat_t
	if err := syscall.Fstat(int(dirFd.Fd()), &before); err != nil {
		return err
	}
	covers := []struct{ dir, size string }{
		{"/run", "256m"}, {"/var/lib", "1g"}, {"/var/log", "256m"},
	}
	for _, h := range a.cfg.HideDirs {
		covers = append(covers, struct{ dir, size string }{h, "1m"})
	}
	for _, c := range covers {
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount("tmpfs", c.dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=755,size="+c.size); err != nil {
			return fmt.Errorf("mounting a tmpfs on %s: %w", c.dir, err)
		}
	}
	// Dir may now be covered: bind it back from the descriptor.
	var now syscall.Stat_t
	if err := syscall.Stat(a.cfg.Dir, &now); err != nil || now.Dev != before.Dev || now.Ino != before.Ino {
		if err := os.MkdirAll(a.cfg.Dir, 0o700); err != nil {
			return err
		}
		src := "/proc/self/fd/" + strconv.Itoa(int(dirFd.Fd()))
		if err := syscall.Mount(src, a.cfg.Dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s back: %w", a.cfg.Dir, err)
		}
	}
	// kubelet's root at its usual, short path (its unix sockets under
	// Dir could exceed 104 bytes), kept on Dir's disk.
	if err := os.MkdirAll(a.path("kubelet"), 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(kubeletRoot, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount(a.path("kubelet"), kubeletRoot, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding kubelet's root: %w", err)
	}
	// The volumes' root, on Dir's disk too (counted in the member's disk
	// limit, gone with the node's directory).
	if err := os.MkdirAll(a.path("storage"), 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(StorageRoot, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount(a.path("storage"), StorageRoot, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding the volumes' root: %w", err)
	}
	for what, p := range map[string]string{"containerd": a.cfg.Containerd, "ctr": a.cfg.Ctr, "kubelet": a.cfg.KubeletBin, "kube-proxy": a.cfg.KubeProxyBin, "CNI bridge plugin": filepath.Join(a.cfg.CNIBinDir, "bridge")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s %s is not visible in the node (hidden by a mount?): %w", what, p, err)
		}
	}
	if err := os.MkdirAll(a.path(LogDir), 0o700); err != nil {
		return err
	}
	// Shared again, inside this namespace only (a new peer group): kubelet
	// expects volume mounts to propagate into containers.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SHARED, ""); err != nil {
		return fmt.Errorf("making / shared in the node: %w", err)
	}
	return nil
}

// network configures the node's end of its veth.
func (a *Agent) network(ctx context.Context) error {
	if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	if a.cfg.Interface == "" {
		ip, err := firstIPv4()
		if err != nil {
			return err
		}
		a.nodeIP = ip
		if a.cfg.OverlayKeyFile != "" {
			if a.overlay, err = newOverlay(a.cfg, ip, a.log); err != nil {
				return err
			}
			if err := a.overlay.setUp(ctx); err != nil {
				return err
			}
		}
		return a.bridgeNetfilter()
	}
	addr := a.cfg.Address
	a.nodeIP, _, _ = strings.Cut(addr, "/")
	if err := a.ip(ctx, "link", "set", "lo", "up"); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	// Asked over netlink: /sys/class/net shows the network namespace of
	// whoever mounted /sys, not this one.
	for exec.CommandContext(ctx, "ip", "link", "show", "dev", a.cfg.Interface).Run() != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("interface %s did not appear within 30s", a.cfg.Interface)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	cmds := [][]string{
		{"addr", "replace", addr, "dev", a.cfg.Interface},
		{"link", "set", a.cfg.Interface, "up"},
		{"route", "replace", "default", "via", a.cfg.Gateway, "dev", a.cfg.Interface},
	}
	for _, r := range a.cfg.PeerRoutes {
		cmds = append(cmds, []string{"route", "replace", r.Dst, "via", r.Via, "dev", a.cfg.Interface})
	}
	for _, c := range cmds {
		if err := a.ip(ctx, c...); err != nil {
			return err
		}
	}
	return a.bridgeNetfilter()
}

// bridgeNetfilter makes bridged pod traffic pass iptables in the node's
// network namespace, which kube-proxy's rules need for pod-to-Service
// traffic whose endpoint is on the same bridge.
func (a *Agent) bridgeNetfilter() error {
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		return errors.New("br_netfilter is not loaded (modprobe br_netfilter)")
	}
	return writeSysctl("net/bridge/bridge-nf-call-iptables", "1")
}

func (a *Agent) ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func writeSysctl(name, value string) error {
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting %s: %w", strings.ReplaceAll(name, "/", "."), err)
	}
	return nil
}

// firstIPv4 is the first global IPv4 address of this network namespace.
func firstIPv4() (string, error) {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "scope", "global").Output()
	if err != nil {
		return "", fmt.Errorf("listing addresses: %w", err)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				ip, _, _ := strings.Cut(f[i+1], "/")
				return ip, nil
			}
		}
	}
	return "", errors.New("no global IPv4 address")
}

// start starts a daemon with output to its log file.
func (a *Agent) start(name, bin string, args ...string) (*daemon, error) {
	logf, err := os.OpenFile(a.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(bin, args...)
	cmd.Env = daemonEnv
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = a.cfg.Dir
	// A group of its own: the backend's SIGTERM to kobe-node's group
	// reaches kobe-node alone, which stops the daemons in order; they die
	// with it if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, done: make(chan struct{})}
	a.daemons = append(a.daemons, d)
	go func() {
		d.err = cmd.Wait()
		close(d.done)
		a.exited <- d
	}()
	a.log.Printf("started %s (pid %d), log %s", name, cmd.Process.Pid, a.logPath(name))
	return d, nil
}

// waitFor polls cond until it holds, a daemon exits, or the timeout.
func (a *Agent) waitFor(ctx context.Context, what string, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, d := range a.daemons {
			select {
			case <-d.done:
				return fmt.Errorf("%s exited while waiting for %s: %w; its log is %s", d.name, what, d.exitErr(), a.logPath(d.name))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not there within %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// ContainerdSocket is containerd's socket, in the node's own /run (a path
// under Dir can exceed the 104 bytes a unix socket path may have): inside a
// node pod, and under /proc/<kobe-node's pid>/root on the operator's host.
const ContainerdSocket = "/run/kobe-node/containerd.sock"

// CRINamespace is the containerd namespace whose images kubelet runs.
const CRINamespace = "k8s.io"

// ImportCommand is the command that imports an image archive into a node's
// CRI images, given containerd's socket and the archive's path ("-" reads
// standard input).
func ImportCommand(ctr, socket, archive string) []string {
	return []string{ctr, "--address", socket, "-n", CRINamespace, "images", "import", archive}
}

// FailureLine is the last line of a failed command's output, which says
// why, cut to a length an error message may carry.
func FailureLine(out []byte) string {
	s := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	if s == "" {
		return "no output"
	}
	return s
}

func (a *Agent) socket() string { return ContainerdSocket }

func (a *Agent) containerd(ctx context.Context) error {
	for _, d := range []string{a.path("containerd"), a.path("cni", "net.d")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	mtu := 0 // the bridge plugin's default: the link's
	if a.overlay != nil {
		mtu = a.overlay.podMTU()
	}
	conflist, err := cniConfig(a.cfg, mtu)
	if err != nil {
		return err
	}
	if err := os.WriteFile(a.path("cni", "net.d", "10-kobe.conflist"), conflist, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(a.path("containerd", "config.toml"), []byte(containerdConfig(a.cfg, a.socket())), 0o600); err != nil {
		return err
	}
	if _, err := a.start("containerd", a.cfg.Containerd, "--config", a.path("containerd", "config.toml")); err != nil {
		return err
	}
	return a.waitFor(ctx, "containerd's socket", time.Minute, func() bool {
		return exec.CommandContext(ctx, a.cfg.Ctr, "--address", a.socket(), "version").Run() == nil
	})
}

// importImages imports the archives (opened before the mounts) into the
// CRI's namespace and checks the pause image is among them.
func (a *Agent) importImages(ctx context.Context) error {
	for i, f := range a.images {
		argv := ImportCommand(a.cfg.Ctr, a.socket(), "/dev/fd/3")
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.ExtraFiles = []*os.File{f}
		cmd.Env = daemonEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("importing %s: %w: %s", a.cfg.Images[i], err, strings.TrimSpace(string(out)))
		}
		_ = f.Close()
	}
	a.images = nil
	out, err := exec.CommandContext(ctx, a.cfg.Ctr, "--address", a.socket(), "-n", CRINamespace, "images", "list", "-q").Output()
	if err != nil {
		return fmt.Errorf("listing images: %w", err)
	}
	for l := range strings.SplitSeq(string(out), "\n") {
		if strings.TrimSpace(l) == a.cfg.PauseImage {
			return nil
		}
	}
	return fmt.Errorf("the pause image %s is not in the imported archives", a.cfg.PauseImage)
}

// inotifyLimits raises the machine's inotify limits (inotify.go) on a
// node of the operator's host; a node pod is a guest on someone else's
// node and only says in its log when its host's are low.
func (a *Agent) inotifyLimits(context.Context) error {
	if a.cfg.CgroupParent == "" {
		a.log.Print(inotifyNote())
		return nil
	}
	note, err := raiseInotifyLimits()
	if err != nil {
		return err
	}
	a.log.Print(note)
	return nil
}

func (a *Agent) kubelet(ctx context.Context) error {
	protect, note := kernelDefaultsSet()
	if a.cfg.CgroupParent == "" && !protect {
		// A node pod is a guest on someone else's node: its kubelet must
		// not change that node's kernel settings. It refuses to start
		// instead, and the member fails saying why.
		protect, note = true, note+"; a node pod never changes its host's kernel settings: protectKernelDefaults on, kubelet refuses to start without them"
	}
	a.log.Print(note)
	cfg, err := kubeletConfig(a.cfg, a.nodeIP, a.cgroupRoot, a.socket(), a.path("pod-logs"), protect)
	if err != nil {
		return err
	}
	if err := os.WriteFile(a.path("kubelet.yaml"), cfg, 0o600); err != nil {
		return err
	}
	if _, err := a.start("kubelet", a.cfg.KubeletBin,
		"--config="+a.path("kubelet.yaml"), "--kubeconfig="+a.cfg.KubeletKubeconfig,
		"--root-dir="+kubeletRoot, "--hostname-override="+a.cfg.Name,
		"--node-ip="+a.nodeIP, "--v=1"); err != nil {
		return err
	}
	return a.waitFor(ctx, "kubelet's healthz", 2*time.Minute, func() bool { return httpOK(ctx, "http://127.0.0.1:10248/healthz") })
}

func (a *Agent) kubeProxy(ctx context.Context) error {
	cfg, err := kubeProxyConfig(a.cfg, a.nodeIP)
	if err != nil {
		return err
	}
	if err := os.WriteFile(a.path("kube-proxy.yaml"), cfg, 0o600); err != nil {
		return err
	}
	if _, err := a.start("kube-proxy", a.cfg.KubeProxyBin, "--config="+a.path("kube-proxy.yaml")); err != nil {
		return err
	}
	return a.waitFor(ctx, "kube-proxy's healthz", 2*time.Minute, func() bool { return httpOK(ctx, "http://127.0.0.1:10256/healthz") })
}

// stop stops kubelet and kube-proxy, kills what is left in the node's
// cgroup (containers, shims), then containerd.
func (a *Agent) stop() {
	var ctrd *daemon
	for _, d := range a.daemons {
		if d.name == "containerd" {
			ctrd = d
			continue
		}
		stopDaemon(d, 5*time.Second)
	}
	if a.cgroupRel != "" {
		var keep []int
		if ctrd != nil {
			keep = append(keep, ctrd.cmd.Process.Pid)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := killCgroupExcept(ctx, a.cgroupRel, keep); err != nil {
			a.log.Printf("killing the node's containers: %v", err)
		}
		cancel()
	}
	if ctrd != nil {
		stopDaemon(ctrd, 5*time.Second)
	}
}

func stopDaemon(d *daemon, grace time.Duration) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// Main is kobe-node's main: it reads the Config and runs the node until
// SIGTERM or SIGINT. Its exit status is non-zero when the node failed.
func Main(args []string, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "--config" {
		fmt.Fprintln(stderr, "usage: kobe-node --config <dir>/node.json")
		return 2
	}
	cfg, err := ReadConfig(args[1])
	if err != nil {
		fmt.Fprintln(stderr, "kobe-node:", err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	a := NewAgent(cfg, stderr)
	if err := a.Run(ctx); err != nil {
		a.log.Printf("node %s failed: %v", cfg.Name, err)
		return 1
	}
	a.log.Printf("node %s stopped", cfg.Name)
	return 0
}
