package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/addressguard"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
	"github.com/kunobi-ninja/kobe/internal/version"
)

// Members with real nodes (spec.backend.local.nodes): each node is a
// kobe-node process (internal/node) in its own network and mount
// namespaces, with containerd, kubelet and kube-proxy under the cgroup
// kobe/<member uid>/n<i>, on the member's bridge in its host network slot.
const (
	// DefaultNodeBinDir is where `make node` puts kubelet and kube-proxy,
	// relative to the repository root.
	DefaultNodeBinDir = "bin/node/" + version.Kubernetes
	// DefaultImageDir holds the pause image archive and the archives pools
	// preload (`make image-pause`), relative to the repository root.
	DefaultImageDir = "bin/images"
	// DefaultPauseImage is the image name in the pause archive.
	DefaultPauseImage = "kobe.local/pause:v1"
	// PauseArchive is the pause image's archive in the image directory.
	PauseArchive = "pause.tar"

	// Host binaries of a node, from the Debian packages containerd, runc
	// and containernetworking-plugins (`make node-deps`).
	containerdBin = "/usr/bin/containerd"
	ctrBin        = "/usr/bin/ctr"
	cniBinDir     = "/usr/lib/cni"

	// nodeMaxPods caps the pods of one node (a node pod's shim is ~14 MB).
	nodeMaxPods = 110
	// DefaultSlotClaimDir holds one file per network slot taken on the
	// host, naming the member directory that took it, shared by every
	// operator on the host (their data roots differ), and a lock file that
	// serialises their choices.
	DefaultSlotClaimDir = "/run/kobe-local-slots"
)

// Names of the files of a node (under nodes/<i>/) and of the API server's
// client certificate for kubelets (under pki/).
const (
	nodeKubeletKubeconfig = "kubelet.kubeconfig"
	nodeProxyKubeconfig   = "kube-proxy.kubeconfig"
	nodeServingCert       = "kubelet-serving.crt"
	nodeServingKey        = "kubelet-serving.key"
	nodeClientCA          = "client-ca.crt"
	kubeletClientCert     = "apiserver-kubelet-client.crt"
	kubeletClientKey      = "apiserver-kubelet-client.key"
)

func nodeCount(m backend.Member) int {
	if m.Spec.Backend.Local == nil {
		return 0
	}
	return int(ptr.Deref(m.Spec.Backend.Local.Nodes, 0))
}

// NodeName is the name of node i of a member in the member's API.
func NodeName(i int) string { return "node-" + strconv.Itoa(i) }

func nodeLogName(i int) string { return "kobe-node-" + strconv.Itoa(i) }

// NodeCgroup is the cgroup (relative to every hierarchy's root) that holds
// every process of a member's nodes.
func NodeCgroup(uid string) string { return "kobe/" + uid }

func nodeCgroup(uid string, i int) string { return NodeCgroup(uid) + "/n" + strconv.Itoa(i) }

// checkNodePrereqs reports, wrapping backend.ErrUnavailable, what a member
// with nodes needs and this host lacks.
func (b *Backend) checkNodePrereqs(v string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: members with nodes need the operator to run as root (network and mount namespaces, cgroups, bridges)", backend.ErrUnavailable)
	}
	for _, f := range []struct{ path, how string }{
		{filepath.Join(b.nodeBinDir(v), "kubelet"), nodeBuild(v, b.defaultVersion())},
		{filepath.Join(b.nodeBinDir(v), "kube-proxy"), nodeBuild(v, b.defaultVersion())},
		{b.opts.NodeAgent, "make build"},
		{containerdBin, "make node-deps"},
		{ctrBin, "make node-deps"},
		{"/usr/sbin/runc", "make node-deps"},
		{filepath.Join(cniBinDir, "bridge"), "make node-deps"},
		{filepath.Join(cniBinDir, "host-local"), "make node-deps"},
	} {
		if err := checkExecutable(f.path); err != nil {
			return fmt.Errorf("%w: %w (get it with `%s`)", backend.ErrUnavailable, err, f.how)
		}
	}
	if filepath.Base(b.opts.NodeAgent) != compNode {
		return fmt.Errorf("%w: the node agent %s must be named %s", backend.ErrUnavailable, b.opts.NodeAgent, compNode)
	}
	for _, a := range []struct{ file, what, how string }{
		{PauseArchive, "pause", "make image-pause"},
		{clusterdns.Archive, "cluster DNS (CoreDNS)", "make image-coredns"},
	} {
		path := filepath.Join(b.opts.ImageDir, a.file)
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: the %s image archive %s is missing (build it with `%s`)", backend.ErrUnavailable, a.what, path, a.how)
		}
	}
	return nil
}

// nodeBuild is the command that builds kubelet and kube-proxy of version v.
func nodeBuild(v, def string) string {
	if v == def {
		return "make node"
	}
	return "make controlplane-versions K8S_EXTRA_VERSIONS=" + v
}

func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s is missing", path)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// nodeImages resolves a member's image archives in the image directory:
// the pause image's first, the cluster DNS's, then
// spec.backend.local.preloadImages. A name
// that is not a plain file name in the directory, or a missing file, is
// refused with an error wrapping backend.ErrInvalidSpec.
func nodeImages(imageDir string, m backend.Member) ([]string, error) {
	out := []string{filepath.Join(imageDir, PauseArchive), filepath.Join(imageDir, clusterdns.Archive)}
	if m.Spec.Backend.Local == nil {
		return out, nil
	}
	for _, name := range m.Spec.Backend.Local.PreloadImages {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || filepath.Base(name) != name || !strings.HasSuffix(name, ".tar") {
			return nil, fmt.Errorf("%w: spec.backend.local.preloadImages: %q is not a file name of an archive (*.tar) in the image directory", backend.ErrInvalidSpec, name)
		}
		path := filepath.Join(imageDir, name)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: spec.backend.local.preloadImages: %s is not a file in the operator's image directory %s", backend.ErrInvalidSpec, name, imageDir)
		}
		if !slices.Contains(out, path) {
			out = append(out, path)
		}
	}
	return out, nil
}

// allocateSlot chooses the lowest network slot that no member under
// DataRoot records and no bridge on the host uses, and records it in the
// member's slot file before anything touches the network. A slot file that
// exists already (an interrupted Create) is kept.
func (b *Backend) allocateSlot(ctx context.Context, p paths) (int, error) {
	if s, ok, err := readSlot(p); err != nil || ok {
		return s, err
	}
	b.slotMu.Lock()
	defer b.slotMu.Unlock()
	claims := b.slotClaimDir
	if err := os.MkdirAll(claims, 0o700); err != nil {
		return 0, err
	}
	lockPath := filepath.Join(claims, "lock")
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", lockPath, err)
	}
	defer func() { _ = lock.Close() }()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("locking %s: %w", lockPath, err)
	}
	used, err := node.UsedSlots(ctx)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(b.opts.DataRoot)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if s, ok, _ := readSlot(paths{dir: filepath.Join(b.opts.DataRoot, e.Name())}); ok {
			used = append(used, s)
		}
	}
	// Other operators' claims count while the member directory they name
	// still records that slot (a claim outlives a crashed destroy).
	for s := range node.MaxSlots {
		owner, err := os.ReadFile(filepath.Join(claims, strconv.Itoa(s)))
		if err != nil {
			continue
		}
		if rec, ok, _ := readSlot(paths{dir: strings.TrimSpace(string(owner))}); ok && rec == s {
			used = append(used, s)
		}
	}
	slot := freeSlot(used)
	if slot < 0 {
		return 0, fmt.Errorf("%w: all %d network slots for members with nodes are in use on this host", backend.ErrUnavailable, node.MaxSlots)
	}
	if err := writeFileAtomic(p.slotFile(), []byte(strconv.Itoa(slot)+"\n"), 0o600); err != nil {
		return 0, err
	}
	if err := writeFileAtomic(filepath.Join(claims, strconv.Itoa(slot)), []byte(p.dir+"\n"), 0o600); err != nil {
		return 0, err
	}
	return slot, nil
}

// releaseSlot removes the host-wide claim of slot if p's member made it.
func (b *Backend) releaseSlot(p paths, slot int) error {
	claim := filepath.Join(b.slotClaimDir, strconv.Itoa(slot))
	owner, err := os.ReadFile(claim)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && strings.TrimSpace(string(owner)) != p.dir) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.Remove(claim); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// freeSlot is the lowest slot in [0, node.MaxSlots) not in used, or -1.
func freeSlot(used []int) int {
	for s := range node.MaxSlots {
		if !slices.Contains(used, s) {
			return s
		}
	}
	return -1
}

func readSlot(p paths) (int, bool, error) {
	data, err := os.ReadFile(p.slotFile())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || s < 0 || s >= node.MaxSlots {
		return 0, false, fmt.Errorf("slot file %s holds %q, not a slot", p.slotFile(), strings.TrimSpace(string(data)))
	}
	return s, true, nil
}

// memberNet is the network plan of a member with nodes.
func memberNet(st *state) (node.MemberNet, error) {
	if st.Slot == nil {
		return node.MemberNet{}, errors.New("state file records no network slot")
	}
	return node.PlanMember(*st.Slot, st.Nodes)
}

// writeAdmissionConfig writes the API server's admission configuration
// for member cluster c and the static policies that keep Pod Security at
// its level and refuse network volumes unless c allows them
// (podsecurity.Render): without them a lease holder could lower a
// namespace's level and run pods that own the operator's machine. The
// policy directory always exists: writeAddressGuard puts the member's
// address guard there once its API server's port is known.
func writeAdmissionConfig(p paths, c kobev1.ClusterTemplate) error {
	config, policies, err := podsecurity.RenderShared(c, p.admissionPolicies())
	if err != nil {
		return err
	}
	if err := os.RemoveAll(p.admissionPolicies()); err != nil {
		return err
	}
	if err := os.MkdirAll(p.admissionPolicies(), 0o700); err != nil {
		return err
	}
	if policies != nil {
		if err := writeFileAtomic(filepath.Join(p.admissionPolicies(), podsecurity.PolicyFile), policies, 0o600); err != nil {
			return err
		}
	}
	return writeFileAtomic(p.admissionConfig(), config, 0o600)
}

// addressGuardFile is the address guard's file in the policy directory.
const addressGuardFile = "member-addresses.yaml"

// writeAddressGuard writes the static policy that keeps every address the
// member's API server dials inside the member (addressguard): its pods'
// and nodes' ranges with nodes, kwok's with scheduling, none without; the
// "kubernetes" Service
// names only the API server. The API server runs in the host's network,
// so without it a forged pod status made it a proxy to the host's
// neighbours. Called before each start of the API server: its port
// changes between attempts.
func writeAddressGuard(p paths, st *state) error {
	r := addressguard.Ranges{APIServer: netip.AddrPortFrom(netip.Addr{}, uint16(st.APIServerPort))}
	if st.Scheduling {
		r.Pods = []netip.Prefix{kwokPodCIDR}
		r.Nodes = []netip.Prefix{netip.PrefixFrom(kwokNodeIP, 32)}
	}
	if st.Nodes > 0 {
		mn, err := memberNet(st)
		if err != nil {
			return err
		}
		r.Pods = []netip.Prefix{mn.ClusterCIDR, mn.Link}
		r.Nodes = []netip.Prefix{mn.Link}
		r.Host = mn.Gateway
		r.APIServer = netip.AddrPortFrom(mn.Gateway, uint16(st.APIServerPort))
	}
	data, err := addressguard.Policy(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(p.admissionPolicies(), addressGuardFile), data, 0o600)
}

// writeKubeletClient writes the API server's client certificate for
// kubelets (logs, exec, port-forward), from the member's client CA, which
// kubelets trust.
func writeKubeletClient(p paths) error {
	ca, err := loadClientCA(p)
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := membercerts.Client(ca, membercerts.KubeletClient)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.pki(kubeletClientCert), certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.pki(kubeletClientKey), keyPEM, 0o600)
}

// writeNodeFiles writes node i's certificates, kubeconfigs and node.json
// and returns the Config.
func (b *Backend) writeNodeFiles(p paths, st *state, mn node.MemberNet, i int, images []string, mirrors map[string][]string) (*node.Config, error) {
	dir := p.node(i)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := loadClientCA(p)
	if err != nil {
		return nil, err
	}
	serverCA, err := os.ReadFile(p.pki(serverCACert))
	if err != nil {
		return nil, err
	}
	nn := mn.Nodes[i]
	name := NodeName(i)
	server := localURL(mn.Gateway.String(), st.APIServerPort)
	dnsIP, err := clusterdns.ServiceIP(mn.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	for _, kc := range []struct {
		file string
		id   membercerts.Identity
	}{
		{nodeKubeletKubeconfig, membercerts.Kubelet(name)},
		{nodeProxyKubeconfig, membercerts.KubeProxy},
	} {
		data, err := membercerts.Kubeconfig(ca, serverCA, "member", server, kc.id)
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(filepath.Join(dir, kc.file), data, 0o600); err != nil {
			return nil, err
		}
	}
	// Signed by the client CA: the member's API server verifies kubelets
	// with it (--kubelet-certificate-authority).
	certPEM, keyPEM, err := membercerts.NodeServing(ca, name, []net.IP{net.IP(nn.Address.Addr().AsSlice())})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, nodeServingCert), certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, nodeServingKey), keyPEM, 0o600); err != nil {
		return nil, err
	}
	// A copy: the node sees nothing of the member's directory but its own.
	if err := os.WriteFile(filepath.Join(dir, nodeClientCA), ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	cfg := &node.Config{
		Name:                name,
		Dir:                 dir,
		HideDirs:            []string{b.opts.DataRoot},
		Interface:           node.NodeInterface,
		Address:             nn.Address.String(),
		Gateway:             mn.Gateway.String(),
		PeerRoutes:          mn.PeerRoutes(i),
		PodCIDR:             nn.PodCIDR.String(),
		ClusterCIDR:         mn.ClusterCIDR.String(),
		ClusterDNS:          dnsIP.String(),
		CgroupParent:        nodeCgroup(string(st.UID), i),
		Containerd:          containerdBin,
		Ctr:                 ctrBin,
		KubeletBin:          filepath.Join(b.nodeBinDir(st.KubernetesVersion), "kubelet"),
		KubeProxyBin:        filepath.Join(b.nodeBinDir(st.KubernetesVersion), "kube-proxy"),
		CNIBinDir:           cniBinDir,
		KubeletKubeconfig:   filepath.Join(dir, nodeKubeletKubeconfig),
		KubeProxyKubeconfig: filepath.Join(dir, nodeProxyKubeconfig),
		KubeletCert:         filepath.Join(dir, nodeServingCert),
		KubeletKey:          filepath.Join(dir, nodeServingKey),
		ClientCAFile:        filepath.Join(dir, nodeClientCA),
		PauseImage:          b.opts.PauseImage,
		Images:              images,
		RegistryMirrors:     mirrors,
		MaxPods:             nodeMaxPods,
		PodPidsLimit:        st.PodPidsLimit,
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := node.WriteConfig(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// startNodes starts the member's nodes that are not running yet, each
// attached to the member's bridge. Called with rt.mu held, after the API
// server answers.
func (b *Backend) startNodes(ctx context.Context, rt *memberRT, p paths, st *state, m backend.Member) error {
	mn, err := memberNet(st)
	if err != nil {
		return err
	}
	images, err := nodeImages(b.opts.ImageDir, m)
	if err != nil {
		return err
	}
	links, err := node.MemberLinks(ctx, mn.Slot)
	if err != nil {
		return err
	}
	for i := range st.Nodes {
		if j := slices.IndexFunc(st.Processes, func(pr process) bool { return pr.Component == compNode && pr.Node == i }); j >= 0 {
			// Started by an operator that stopped before attaching it.
			if pr := st.Processes[j]; !slices.Contains(links, mn.Nodes[i].HostInterface) {
				if alive, _ := b.alive(rt, p, pr); alive {
					if err := b.attachNode(ctx, mn, i, pr.PID); err != nil {
						return err
					}
				}
			}
			continue
		}
		cfg, err := b.writeNodeFiles(p, st, mn, i, images, m.Spec.Cluster.MirrorsByRegistry())
		if err != nil {
			return fmt.Errorf("writing the files of node %d: %w", i, err)
		}
		if st.Confined {
			if err := limitNode(m, i, cfg); err != nil {
				return err
			}
			if err := node.WriteConfig(cfg); err != nil {
				return err
			}
		}
		pr, err := b.startNode(rt, p, st, cfg, i)
		if err != nil {
			return err
		}
		st.Processes = append(st.Processes, pr)
		if err := writeState(p, st); err != nil {
			return err
		}
		if err := b.attachNode(ctx, mn, i, pr.PID); err != nil {
			return err
		}
	}
	return nil
}

func (b *Backend) attachNode(ctx context.Context, mn node.MemberNet, i, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := node.AttachNode(ctx, mn, i, pid); err != nil {
		return fmt.Errorf("attaching node %d to %s: %w", i, mn.Bridge, err)
	}
	return nil
}

// startNode starts kobe-node for node i in new network and mount
// namespaces, as a child in its own process group (like the other
// components), output appended to logs/kobe-node-<i>.log.
func (b *Backend) startNode(rt *memberRT, p paths, st *state, cfg *node.Config, i int) (process, error) {
	logPath := p.log(nodeLogName(i))
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return process{}, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return process{}, fmt.Errorf("opening log of node %d: %w", i, err)
	}
	defer func() { _ = logf.Close() }()
	fmt.Fprintf(logf, "--- kobe: starting %s (attempt %d) at %s\n", compNode, st.Attempt, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := node.Command(b.opts.NodeAgent, filepath.Join(cfg.Dir, node.ConfigFile), logf)
	if err := startNiced(cmd, b.opts.MemberNice); err != nil {
		return process{}, fmt.Errorf("starting node %d: %w", i, err)
	}
	ch := &child{done: make(chan struct{})}
	rt.children[cmd.Process.Pid] = ch
	go func() {
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	return process{Component: compNode, Node: i, PID: cmd.Process.Pid, StartedAt: time.Now().UTC()}, nil
}

// nodesReady reports an error until every node of the member is Ready.
func nodesReady(ctx context.Context, cs kubernetes.Interface, names []string) error {
	for _, name := range names {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("node %s not registered yet", name)
		case err != nil:
			return fmt.Errorf("reading node %s: %w", name, err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s is not Ready yet", name)
		}
	}
	return nil
}

// readyNodes are the nodes Observe waits for.
func readyNodes(st *state) []string {
	if st.Scheduling {
		return []string{FakeNodeName}
	}
	names := make([]string, st.Nodes)
	for i := range names {
		names[i] = NodeName(i)
	}
	return names
}

// destroyNodeHost removes what a member's nodes leave on the host once
// kobe-node is gone: processes still in the member's cgroups (containers,
// shims), the cgroups, the member's network, and any mount under its
// directory seen from the host. Nothing to do for a member that never had
// nodes. Idempotent.
func (b *Backend) destroyNodeHost(ctx context.Context, p paths) error {
	slot, hasSlot, slotErr := readSlot(p)
	_, nodesErr := os.Stat(filepath.Join(p.dir, "nodes"))
	if !hasSlot && slotErr == nil && errors.Is(nodesErr, fs.ErrNotExist) {
		return nil
	}
	uid, ok := uidFromDirName(filepath.Base(p.dir))
	if !ok {
		return fmt.Errorf("%s does not name a member", p.dir)
	}
	kctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err := node.KillCgroup(kctx, NodeCgroup(string(uid)))
	cancel()
	if err != nil {
		return fmt.Errorf("%w: %w", errStillRunning, err)
	}
	if err := node.RemoveCgroup(NodeCgroup(string(uid))); err != nil {
		return err
	}
	// The shared parent goes with the last member that used it.
	if err := node.RemoveEmptyCgroup(filepath.Dir(NodeCgroup(string(uid)))); err != nil {
		return err
	}
	if slotErr != nil {
		return slotErr
	}
	if hasSlot {
		if err := node.TearDownMemberNetwork(ctx, slot); err != nil {
			return err
		}
		if err := b.releaseSlot(p, slot); err != nil {
			return err
		}
	}
	return unmountUnder(p.dir)
}

// unmountUnder detaches every mount at or under dir in the host's mount
// namespace (there should be none: nodes mount in their own).
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			mounts = append(mounts, mp)
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mounts {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", mp, err)
		}
	}
	return nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				sb.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// NodeSlot returns the network slot recorded for a member with nodes (ok
// is false when none is, or the member does not exist).
func (b *Backend) NodeSlot(m backend.Member) (slot int, ok bool, err error) {
	if err := validMember(m); err != nil {
		return 0, false, err
	}
	return readSlot(b.paths(m))
}

// MemberDir is a member's data directory.
func (b *Backend) MemberDir(m backend.Member) string { return b.paths(m).dir }

// DefaultNodes implements backend.NodeDefaulter: Options.DefaultNodes, and
// with Auto one node where this host can run the nodes of the pool's
// version, none (saying what is missing) where it cannot.
func (b *Backend) DefaultNodes(spec *kobev1.ClusterPoolSpec) (int32, string) {
	d := b.opts.DefaultNodes
	if !d.Auto {
		if d.Count == 0 {
			return 0, "this operator's --local-default-nodes is 0"
		}
		return d.Count, ""
	}
	v := strings.TrimPrefix(spec.Cluster.Version, "v")
	if v == "" {
		v = b.defaultVersion()
	}
	if err := b.checkNodePrereqs(v); err != nil {
		return 0, strings.TrimPrefix(err.Error(), backend.ErrUnavailable.Error()+": ")
	}
	return 1, ""
}
