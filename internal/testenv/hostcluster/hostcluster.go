package hostcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const (
	certValidity = 30 * 24 * time.Hour
	saIssuer     = "https://kubernetes.default.svc.cluster.local"
	// readyTimeout bounds each wait of Start (API server, socket, node).
	readyTimeout = 2 * time.Minute
)

// Options configures a host cluster; the zero value is usable once
// PauseImage is set.
type Options struct {
	// Dir holds all state; DefaultDir when empty. Only one host cluster
	// runs per Dir, and Teardown of the same Dir cleans up after a crash.
	Dir string
	// ControlPlaneDir holds etcd and the kube-* control-plane commands
	// (testenv.BinDir when empty); NodeDir kubelet and kube-proxy
	// (NodeBinDir when empty).
	ControlPlaneDir, NodeDir string
	// NodeName is the node's name ("kobe-host" when empty).
	NodeName string
	// PauseImage is the sandbox image's reference as containerd names it
	// after importing (a bare name becomes docker.io/library/<name>).
	PauseImage string
	// Images are image tarballs (OCI layout or docker-archive) imported
	// into containerd's k8s.io namespace before kubelet starts; the pause
	// image must be among them. Pods use them with imagePullPolicy Never.
	Images []string
}

// Cluster is a running host cluster.
type Cluster struct {
	Dir      string
	NodeName string
	// NodeIP is the machine's own address: the API server's advertise
	// address and the node's InternalIP.
	NodeIP string
	// Kubeconfig is an admin kubeconfig file (system:masters).
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	// Containerd is containerd's socket (for ctr --address).
	Containerd string
	// Timings are the durations of Start's steps, in order.
	Timings []Timing

	unlock  func() // releases the Dir's lock
	stopped bool
}

// Timing is how long one step of Start took.
type Timing struct {
	Step     string
	Duration time.Duration
}

// NodeBinDir is where hack/build-node.sh puts kubelet and kube-proxy;
// NODE_DIR overrides it.
func NodeBinDir() string {
	if d := os.Getenv("NODE_DIR"); d != "" {
		return d
	}
	return filepath.Join(testenv.RepoRoot(), "bin", "node", testenv.KubernetesVersion)
}

// Start tears down whatever an earlier run left in the options' Dir,
// starts a host cluster, waits for its node to be Ready, and tears it down
// when the test ends (failing the test when teardown fails).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := New(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting host cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("tearing down host cluster: %v", err)
		}
	})
	return c
}

// Stop tears the host cluster down and releases its Dir's lock; a later
// Stop is a Teardown of the Dir (which takes the lock again).
func (c *Cluster) Stop(ctx context.Context) error {
	if c.stopped {
		return Teardown(ctx, c.Dir)
	}
	c.stopped = true
	defer c.unlock()
	return teardown(ctx, c.Dir)
}

// New is Start outside a test: the caller must call Stop. When New fails it
// has torn down what it started, and returns no Cluster.
func New(ctx context.Context, opts Options) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("a host cluster needs root (kubelet, containerd, routes, iptables)")
	}
	if opts.PauseImage == "" {
		return nil, errors.New("Options.PauseImage is empty")
	}
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.ControlPlaneDir == "" {
		opts.ControlPlaneDir = testenv.BinDir()
	}
	if opts.NodeDir == "" {
		opts.NodeDir = NodeBinDir()
	}
	if opts.NodeName == "" {
		opts.NodeName = "kobe-host"
	}
	if err := checkBinaries(opts); err != nil {
		return nil, err
	}
	unlock, err := lock(ctx, opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := teardown(ctx, opts.Dir); err != nil {
		unlock()
		return nil, fmt.Errorf("cleaning up an earlier host cluster in %s: %w", opts.Dir, err)
	}
	ip, err := machineIP(ctx)
	if err != nil {
		unlock()
		return nil, err
	}
	c = &Cluster{Dir: opts.Dir, NodeName: opts.NodeName, NodeIP: ip, unlock: unlock}
	defer func() {
		if err != nil {
			if terr := c.Stop(context.Background()); terr != nil {
				err = errors.Join(err, fmt.Errorf("tearing down after the failed start: %w", terr))
			}
			c = nil
		}
	}()
	if err := recordHostState(opts.Dir); err != nil {
		return c, err
	}
	s := &starter{c: c, opts: opts, ctx: ctx}
	for _, st := range []struct {
		name string
		fn   func() error
	}{
		{"routes", s.routes},
		{"certificates", s.certificates},
		{"control plane", s.controlPlane},
		{"containerd", s.containerd},
		{"images", s.images},
		{"kubelet: node Ready", s.kubelet},
		{"kube-proxy", s.kubeProxy},
		{"default ServiceAccount", s.defaultServiceAccount},
	} {
		start := time.Now()
		if err := st.fn(); err != nil {
			return c, fmt.Errorf("%s: %w (logs in %s/logs until teardown)", st.name, err, opts.Dir)
		}
		c.Timings = append(c.Timings, Timing{st.name, time.Since(start)})
	}
	return c, nil
}

func checkBinaries(opts Options) error {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(opts.ControlPlaneDir, b)); err != nil {
			return fmt.Errorf("%s missing in %s: run `make controlplane`", b, opts.ControlPlaneDir)
		}
	}
	for _, b := range []string{"kubelet", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(opts.NodeDir, b)); err != nil {
			return fmt.Errorf("%s missing in %s: run `make node`", b, opts.NodeDir)
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "iptables-save", "iptables-restore", "nft", "ip", "conntrack"} {
		if _, err := lookPath(b); err != nil {
			return fmt.Errorf("%s not found: run hack/node-deps.sh (as root)", b)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		return errors.New("the CNI plugins are missing in /usr/lib/cni: run hack/node-deps.sh (as root)")
	}
	return nil
}

func lookPath(name string) (string, error) {
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// machineIP is the machine's own IPv4 address: the source address of its
// route to a TEST-NET-2 address (the lookup sends nothing).
func machineIP(ctx context.Context) (string, error) {
	out, err := run(ctx, "ip", "-4", "-o", "route", "get", "198.51.100.1")
	if err != nil {
		return "", fmt.Errorf("finding the machine's address: %w", err)
	}
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "src" {
			if ip := net.ParseIP(f[i+1]); ip != nil && !ip.IsLoopback() {
				return ip.String(), nil
			}
		}
	}
	return "", fmt.Errorf("no source address in %q", strings.TrimSpace(out))
}

// starter holds what Start's steps share.
type starter struct {
	c    *Cluster
	opts Options
	ctx  context.Context

	apiPort int
}

func (s *starter) path(elem ...string) string {
	return filepath.Join(append([]string{s.opts.Dir}, elem...)...)
}

// routes keeps both ranges on the machine before anything can send to
// them: the pod range unreachable, the Service range into an empty bridge.
func (s *starter) routes() error {
	for _, args := range [][]string{
		{"route", "add", "unreachable", PodCIDR},
		{"link", "add", ServiceBridge, "type", "bridge"},
		{"link", "set", ServiceBridge, "up"},
		{"route", "add", ServiceCIDR, "dev", ServiceBridge},
	} {
		if _, err := run(s.ctx, "ip", args...); err != nil {
			return fmt.Errorf("refusing to start without the route: %w", err)
		}
	}
	// Pods' packets for anything outside 198.18.0.0/15 that the machine
	// would forward (not its own addresses, which are input) are dropped:
	// without masquerading nothing would answer them, but they would
	// still leave the machine.
	for _, args := range [][]string{
		{"-N", EgressChain},
		{"-A", EgressChain, "-d", "198.18.0.0/15", "-j", "RETURN"},
		{"-A", EgressChain, "-j", "DROP"},
		{"-I", "FORWARD", "1", "-s", "198.18.0.0/15", "-j", EgressChain},
	} {
		if _, err := run(s.ctx, "iptables", append([]string{"-w"}, args...)...); err != nil {
			return fmt.Errorf("refusing to start without the egress guard: %w", err)
		}
	}
	return nil
}

// pki files, under <dir>/pki.
const (
	serverCACert   = "server-ca.crt"
	clientCACert   = "client-ca.crt"
	apiserverCert  = "apiserver.crt"
	apiserverKey   = "apiserver.key"
	kubeletCert    = "kubelet.crt"
	kubeletKey     = "kubelet.key"
	kubeletClCert  = "apiserver-kubelet-client.crt"
	kubeletClKey   = "apiserver-kubelet-client.key"
	saKeyFile      = "sa.key"
	saPubFile      = "sa.pub"
	kubernetesSvIP = "198.19.0.1"
)

// identities are the users the components authenticate as; the bootstrap
// RBAC policy (and the Node authorizer for kubelet) grants what they need.
func (s *starter) identities() map[string][2]string {
	return map[string][2]string{
		"admin":                   {"kobe-host-admin", "system:masters"},
		"kube-controller-manager": {"system:kube-controller-manager", ""},
		"kube-scheduler":          {"system:kube-scheduler", ""},
		"kubelet":                 {"system:node:" + s.c.NodeName, "system:nodes"},
		"kube-proxy":              {"system:kube-proxy", ""},
	}
}

func (s *starter) certificates() error {
	dir := s.path("pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	serverCA, err := pki.NewCA("kobe-host-server-ca", certValidity+time.Hour)
	if err != nil {
		return err
	}
	clientCA, err := pki.NewCA("kobe-host-client-ca", certValidity+time.Hour)
	if err != nil {
		return err
	}
	nodeIP := net.ParseIP(s.c.NodeIP)
	apiCert, apiKey, err := serverCA.IssueServing("kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), nodeIP, net.ParseIP(kubernetesSvIP)}, certValidity)
	if err != nil {
		return err
	}
	kCert, kKey, err := serverCA.IssueServing(s.c.NodeName, []string{s.c.NodeName}, []net.IP{nodeIP}, certValidity)
	if err != nil {
		return err
	}
	now := time.Now()
	clCert, clKey, err := clientCA.IssueClient("kube-apiserver-kubelet-client", []string{"system:masters"}, now.Add(-5*time.Minute), now.Add(certValidity))
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	files := map[string][]byte{
		serverCACert:  serverCA.CertPEM,
		clientCACert:  clientCA.CertPEM,
		apiserverCert: apiCert, apiserverKey: apiKey,
		kubeletCert: kCert, kubeletKey: kKey,
		kubeletClCert: clCert, kubeletClKey: clKey,
		saKeyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saDER}),
		saPubFile: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	s.apiPort, err = testenv.FreePort()
	if err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(s.c.NodeIP, strconv.Itoa(s.apiPort))
	for name, id := range s.identities() {
		var groups []string
		if id[1] != "" {
			groups = []string{id[1]}
		}
		cert, key, err := clientCA.IssueClient(id[0], groups, now.Add(-5*time.Minute), now.Add(certValidity))
		if err != nil {
			return err
		}
		kc, err := pki.Kubeconfig(pki.KubeconfigInput{
			ClusterName: "kobe-host", Server: server, CAData: serverCA.CertPEM,
			UserName: id[0], ClientCertPEM: cert, ClientKeyPEM: key,
		})
		if err != nil {
			return err
		}
		if err := os.WriteFile(s.path(name+".kubeconfig"), kc, 0o600); err != nil {
			return err
		}
	}
	s.c.Kubeconfig = s.path("admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", s.c.Kubeconfig)
	if err != nil {
		return err
	}
	s.c.Config = cfg
	s.c.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

func (s *starter) start(name, bin string, args ...string) error {
	_, err := startProcess(s.opts.Dir, name, bin, args, nil)
	return err
}

// controlPlane starts etcd (on unix sockets in Dir, so no port can
// collide), kube-apiserver on the machine's address, the controller
// manager and the scheduler, and waits for /readyz.
func (s *starter) controlPlane() error {
	bin := func(n string) string { return filepath.Join(s.opts.ControlPlaneDir, n) }
	p := func(n string) string { return s.path("pki", n) }
	const etcdURL = "unix://etcd-client.sock:0"
	if err := s.start("etcd", bin("etcd"),
		"--name=host", "--data-dir="+s.path("etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls=unix://etcd-peer.sock:0", "--initial-advertise-peer-urls=unix://etcd-peer.sock:0",
		"--initial-cluster=host=unix://etcd-peer.sock:0", "--initial-cluster-state=new",
		"--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	if err := s.start("kube-apiserver", bin("kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address="+s.c.NodeIP, "--advertise-address="+s.c.NodeIP,
		"--secure-port="+strconv.Itoa(s.apiPort), "--cert-dir="+s.path("pki"),
		"--tls-cert-file="+p(apiserverCert), "--tls-private-key-file="+p(apiserverKey),
		"--client-ca-file="+p(clientCACert),
		"--service-account-issuer="+saIssuer, "--service-account-key-file="+p(saPubFile),
		"--service-account-signing-key-file="+p(saKeyFile),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range="+ServiceCIDR, "--allow-privileged=true",
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--kubelet-certificate-authority="+p(serverCACert),
		"--kubelet-client-certificate="+p(kubeletClCert), "--kubelet-client-key="+p(kubeletClKey),
		"--profiling=false"); err != nil {
		return err
	}
	if err := s.wait("API server ready", func() (bool, error) {
		body, err := s.c.Client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(s.ctx)
		return err == nil && string(body) == "ok", nil
	}); err != nil {
		return err
	}
	if err := s.start("kube-controller-manager", bin("kube-controller-manager"),
		"--kubeconfig="+s.path("kube-controller-manager.kubeconfig"),
		"--service-account-private-key-file="+p(saKeyFile), "--root-ca-file="+p(serverCACert),
		"--use-service-account-credentials=true", "--controllers=*",
		"--leader-elect=false", "--secure-port=0"); err != nil {
		return err
	}
	return s.start("kube-scheduler", bin("kube-scheduler"),
		"--kubeconfig="+s.path("kube-scheduler.kubeconfig"), "--leader-elect=false", "--secure-port=0")
}

// wait polls cond every 100 ms until it holds, readyTimeout passes, or a
// process of the host cluster has exited.
func (s *starter) wait(what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(s.ctx, readyTimeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if dead := s.exited(); dead != "" {
			// The log goes with the teardown: its end goes into the error.
			log := s.path("logs", dead+".log")
			return fmt.Errorf("waiting for %s: %s exited (see %s); its log ends:\n%s", what, dead, log, logTail(log, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail is the last n lines of the file at path (or why it cannot be
// read).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// exited names a started process that is no longer running, or "".
func (s *starter) exited() string {
	entries, _ := os.ReadDir(s.path("pids"))
	for _, e := range entries {
		b, err := os.ReadFile(s.path("pids", e.Name()))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid > 0 && waitGone(pid, 0) {
			return e.Name()
		}
	}
	return ""
}

// containerd starts containerd with its root, state, sockets and runc root
// under Dir and the CRI settings this machine needs.
func (s *starter) containerd() error {
	sock := s.path("containerd", "containerd.sock")
	s.c.Containerd = sock
	for _, d := range []string{s.path("containerd"), s.path("cni", "net.d")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := s.writeCNIConfig(); err != nil {
		return err
	}
	if err := os.WriteFile(s.path("containerd", "config.toml"), []byte(s.containerdConfig(sock)), 0o600); err != nil {
		return err
	}
	if err := s.start("containerd", "/usr/bin/containerd", "--config", s.path("containerd", "config.toml")); err != nil {
		return err
	}
	return s.wait("containerd's socket", func() (bool, error) {
		_, err := run(s.ctx, "ctr", "--address", sock, "version")
		return err == nil, nil
	})
}

// containerdConfig is containerd's configuration: the same settings as a
// member node's (internal/node), with root, state, runc root and CNI
// configuration under Dir.
func (s *starter) containerdConfig(sock string) string {
	return node.ContainerdConfig(node.ContainerdSettings{
		Dir: s.path(), Socket: sock, PauseImage: s.opts.PauseImage,
		CNIBinDir: "/usr/lib/cni", CNIConfDir: s.path("cni", "net.d"),
	})
}

// writeCNIConfig writes the bridge network: pods on NodePodCIDR behind
// PodBridge, host-local's leases under Dir. No masquerading: pods talk
// to the machine's own address and to each other, and nothing of theirs
// is meant to leave the machine.
func (s *starter) writeCNIConfig() error {
	b, err := node.BridgeConflist(node.BridgeNetwork{Name: CNINetwork, Bridge: PodBridge, Subnet: NodePodCIDR, IPAMDir: s.path("cni", "ipam")})
	if err != nil {
		return err
	}
	return os.WriteFile(s.path("cni", "net.d", "10-"+CNINetwork+".conflist"), b, 0o600)
}

// images imports the image tarballs into containerd's k8s.io namespace
// (the CRI's) and checks that the pause image is among them.
func (s *starter) images() error {
	for _, img := range s.opts.Images {
		if _, err := run(s.ctx, "ctr", "--address", s.c.Containerd, "-n", "k8s.io", "images", "import", img); err != nil {
			return err
		}
	}
	out, err := run(s.ctx, "ctr", "--address", s.c.Containerd, "-n", "k8s.io", "images", "list", "-q")
	if err != nil {
		return err
	}
	for _, l := range lines(out) {
		if l == s.opts.PauseImage {
			return nil
		}
	}
	return fmt.Errorf("the pause image %s is not among the imported images (%s)", s.opts.PauseImage, strings.Join(lines(out), ", "))
}

// kubelet starts kubelet (cgroupfs, cgroup v1 allowed, root dir and pod
// logs under Dir, a serving certificate from the server CA, webhook
// authentication and authorization) and waits for its node to be Ready.
func (s *starter) kubelet() error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	healthz, err := testenv.FreePort()
	if err != nil {
		return err
	}
	p := func(n string) string { return s.path("pki", n) }
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"containerRuntimeEndpoint": "unix://" + s.c.Containerd,
		"address":                  s.c.NodeIP,
		"port":                     port,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              healthz,
		"tlsCertFile":              p(kubeletCert),
		"tlsPrivateKeyFile":        p(kubeletKey),
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": p(clientCACert)},
		},
		"authorization": map[string]string{"mode": "Webhook"},
		"clusterDomain": "cluster.local",
		// No DNS for pods: the machine's resolv.conf would send their
		// lookups off the machine.
		"resolvConf":                  "",
		"failSwapOn":                  false,
		"podCIDR":                     NodePodCIDR,
		"podLogsDir":                  s.path("pod-logs"),
		"serializeImagePulls":         false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// A shared CI disk can be fuller than kubelet's defaults allow
		// (DiskPressure would keep pods off the node).
		"evictionHard":        map[string]string{"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"shutdownGracePeriod": "0s",
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.path("kubelet.yaml"), b, 0o600); err != nil {
		return err
	}
	if err := s.start("kubelet", filepath.Join(s.opts.NodeDir, "kubelet"),
		"--config="+s.path("kubelet.yaml"), "--kubeconfig="+s.path("kubelet.kubeconfig"),
		"--root-dir="+s.path("kubelet"), "--hostname-override="+s.c.NodeName,
		"--node-ip="+s.c.NodeIP, "--v=1"); err != nil {
		return err
	}
	return s.wait("node "+s.c.NodeName+" Ready", func() (bool, error) {
		n, err := s.c.Client.CoreV1().Nodes().Get(s.ctx, s.c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not registered yet
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// kubeProxy starts kube-proxy in iptables mode, changing no conntrack
// sysctl and not enabling route_localnet, NodePorts on the machine's
// address only; it waits for its healthz.
func (s *starter) kubeProxy() error {
	healthz, err := testenv.FreePort()
	if err != nil {
		return err
	}
	metrics, err := testenv.FreePort()
	if err != nil {
		return err
	}
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]string{"kubeconfig": s.path("kube-proxy.kubeconfig")},
		"hostnameOverride":   s.c.NodeName,
		"mode":               "iptables",
		"clusterCIDR":        PodCIDR,
		"healthzBindAddress": "127.0.0.1:" + strconv.Itoa(healthz),
		"metricsBindAddress": "127.0.0.1:" + strconv.Itoa(metrics),
		"nodePortAddresses":  []string{s.c.NodeIP + "/32"},
		"conntrack":          map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
		"iptables":           map[string]any{"localhostNodePorts": false},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.path("kube-proxy.yaml"), b, 0o600); err != nil {
		return err
	}
	if err := s.start("kube-proxy", filepath.Join(s.opts.NodeDir, "kube-proxy"), "--config="+s.path("kube-proxy.yaml")); err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(healthz) + "/healthz"
	return s.wait("kube-proxy healthz", func() (bool, error) {
		return httpOK(s.ctx, url), nil
	})
}

// defaultServiceAccount waits for the controller manager to create the
// default namespace's ServiceAccount, which pods need.
func (s *starter) defaultServiceAccount() error {
	return s.wait("ServiceAccount default/default", func() (bool, error) {
		_, err := s.c.Client.CoreV1().ServiceAccounts("default").Get(s.ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	})
}

// httpOK tells whether a GET of url answers 200 within a second.
func httpOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
