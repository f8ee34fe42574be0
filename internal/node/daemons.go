package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// containerdConfig is the node's containerd configuration.
func containerdConfig(c *Config, sock string) string {
	return ContainerdConfig(ContainerdSettings{
		Dir: c.Dir, Socket: sock, PauseImage: c.PauseImage,
		CNIBinDir: c.CNIBinDir, CNIConfDir: filepath.Join(c.Dir, "cni", "net.d"),
		Mirrors: c.RegistryMirrors,
	})
}

// ContainerdSettings are what differs between the containerd instances
// kobe runs: a member's node, and the test host cluster's node.
type ContainerdSettings struct {
	// Dir holds containerd's root and state (Dir/containerd/{root,state})
	// and runc's root (Dir/runc).
	Dir        string
	Socket     string
	PauseImage string
	CNIBinDir  string
	CNIConfDir string
	// Mirrors maps a registry host ("*": every registry) to the URLs
	// pulls of its images go to first.
	Mirrors map[string][]string
}

// ContainerdConfig is containerd 1.6's configuration (version 2), with
// everything under Dir. restrict_oom_score_adj: root on this kind of
// machine may lack CAP_SYS_RESOURCE, and without it every sandbox fails
// ("can't get final child's PID from pipe"). The plugins that would write
// outside Dir or are unused are off; the CRI's streaming server listens on
// loopback, on a free port.
func ContainerdConfig(s ContainerdSettings) string {
	q := strconv.Quote
	p := func(elem ...string) string { return filepath.Join(append([]string{s.Dir}, elem...)...) }
	return strings.Join(append([]string{
		"version = 2",
		"root = " + q(p("containerd", "root")),
		"state = " + q(p("containerd", "state")),
		`disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]`,
		"[grpc]",
		"  address = " + q(s.Socket),
		"[ttrpc]",
		"  address = " + q(s.Socket+".ttrpc"),
		"[metrics]",
		`  address = ""`,
		`[plugins."io.containerd.grpc.v1.cri"]`,
		"  sandbox_image = " + q(s.PauseImage),
		"  restrict_oom_score_adj = true",
		`  stream_server_address = "127.0.0.1"`,
		`  stream_server_port = "0"`,
		`  [plugins."io.containerd.grpc.v1.cri".containerd]`,
		`    snapshotter = "overlayfs"`,
		`    default_runtime_name = "runc"`,
		`    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`,
		`      runtime_type = "io.containerd.runc.v2"`,
		`      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`,
		`        SystemdCgroup = false`,
		"        Root = " + q(p("runc")),
		`  [plugins."io.containerd.grpc.v1.cri".cni]`,
		"    bin_dir = " + q(s.CNIBinDir),
		"    conf_dir = " + q(s.CNIConfDir),
	}, mirrorLines(s.Mirrors)...), "\n") + "\n"
}

// mirrorLines are containerd 1.6's CRI registry mirror tables, in registry
// order (a stable file for a stable input). Names and URLs reach the file
// as TOML basic strings: the CRD allows no quote, backslash or control
// character in them, and strconv.Quote escapes what TOML reads alike.
func mirrorLines(mirrors map[string][]string) []string {
	var out []string
	for _, reg := range slices.Sorted(maps.Keys(mirrors)) {
		eps := make([]string, len(mirrors[reg]))
		for i, e := range mirrors[reg] {
			eps[i] = strconv.Quote(e)
		}
		out = append(out,
			`  [plugins."io.containerd.grpc.v1.cri".registry.mirrors.`+strconv.Quote(reg)+`]`,
			"    endpoint = ["+strings.Join(eps, ", ")+"]")
	}
	return out
}

// podBridge is the bridge of the node's pods (in the node's own network
// namespace).
const podBridge = "cni0"

// cniConfig is the node's pod network: a bridge cni0 (in the node's own
// network namespace) on PodCIDR, host-local leases under Dir, no
// masquerading (the member's host routes pod ranges to the nodes). mtu,
// when not 0, is the pods' MTU (a node pod's overlay's).
func cniConfig(c *Config, mtu int) ([]byte, error) {
	return BridgeConflist(BridgeNetwork{Name: "kobe", Bridge: podBridge, Subnet: c.PodCIDR, IPAMDir: filepath.Join(c.Dir, "cni", "ipam"), MTU: mtu})
}

// BridgeNetwork is a CNI network of pods on one bridge.
type BridgeNetwork struct {
	Name, Bridge, Subnet string
	// IPAMDir holds host-local's leases.
	IPAMDir string
	// MTU is the bridge's and the pods' MTU; 0: the plugin's default.
	MTU int
}

// BridgeConflist is the CNI conflist of n: the bridge plugin as the pods'
// gateway, hairpin on (a pod reaching a Service whose endpoint is itself),
// no masquerading, then portmap.
func BridgeConflist(n BridgeNetwork) ([]byte, error) {
	bridge := map[string]any{
		"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": n.Subnet}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": n.IPAMDir,
		},
	}
	if n.MTU > 0 {
		bridge["mtu"] = n.MTU
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.Name,
		"plugins": []any{
			bridge,
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeletSysctls are the kernel settings kubelet enforces machine-wide
// unless protectKernelDefaults is on (then it refuses to start when they
// differ).
var kubeletSysctls = map[string]string{
	"kernel/panic":         "10",
	"kernel/panic_on_oops": "1",
	"vm/overcommit_memory": "1",
}

// kernelDefaultsSet reports whether the machine already has kubelet's
// kernel settings. Only then is protectKernelDefaults on: kubelet leaves
// them alone. Otherwise kubelet sets them for the whole machine (they are
// not namespaced); the note says which, for the node's log.
func kernelDefaultsSet() (bool, string) {
	var differ []string
	for k, want := range kubeletSysctls {
		got, err := os.ReadFile("/proc/sys/" + k)
		if err != nil || strings.TrimSpace(string(got)) != want {
			differ = append(differ, fmt.Sprintf("%s=%s (now %s)", strings.ReplaceAll(k, "/", "."), want, strings.TrimSpace(string(got))))
		}
	}
	if len(differ) == 0 {
		return true, "the machine has kubelet's kernel settings: protectKernelDefaults on"
	}
	return false, "kubelet sets machine-wide kernel settings: " + strings.Join(differ, ", ")
}

// webhookCacheTTL is how long kubelet keeps the member API server's answers
// on who a caller is and what it may do (minutes by default): once a lease
// ends and its member's API server is stopped, the lease's certificate and
// the tokens minted inside must not keep working against a kubelet from a
// cached answer. Not 0: kubelet reads 0 as "unset" and takes its defaults.
const webhookCacheTTL = "1ms"

// kubeletConfig is kubelet's configuration: cgroupfs under cgroupRoot,
// cgroup v1 allowed, root dir and pod logs under Dir, the member's serving
// certificate, webhook authentication and authorization with the member's
// client CA and (next to) no caching of their answers. Pods resolve through
// the member's cluster DNS (ClusterDNS) and nothing else: resolvConf is
// empty, so the machine's resolv.conf, which would send lookups off the
// machine, reaches no pod. Fixed ports: the node has its own network
// namespace.
func kubeletConfig(c *Config, nodeIP, cgroupRoot, sock, podLogs string, protectKernelDefaults bool) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               cgroupRoot,
		"containerRuntimeEndpoint": "unix://" + sock,
		"address":                  nodeIP,
		"port":                     KubeletPort,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              10248,
		"tlsCertFile":              c.KubeletCert,
		"tlsPrivateKeyFile":        c.KubeletKey,
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]any{"enabled": true, "cacheTTL": webhookCacheTTL},
			"x509":      map[string]string{"clientCAFile": c.ClientCAFile},
		},
		"authorization": map[string]any{
			"mode": "Webhook",
			"webhook": map[string]string{
				"cacheAuthorizedTTL": webhookCacheTTL, "cacheUnauthorizedTTL": webhookCacheTTL,
			},
		},
		"clusterDomain":       "cluster.local",
		"resolvConf":          "",
		"failSwapOn":          false,
		"podCIDR":             c.PodCIDR,
		"podLogsDir":          podLogs,
		"serializeImagePulls": false,
		// The disk is shared with the host (the operator's machine, or the
		// host node under a node pod): the member's pods are evicted well
		// before it fills up (about kubelet's defaults). Its images are
		// never collected (100 turns kubelet's collection off): what
		// fills a shared disk is mostly not the member's, and collecting
		// removed the pause image and the preloaded ones, which a member
		// without egress cannot pull again (containerd 1.6 pins nothing),
		// so every later pod failed (found by the conformance suite). A
		// member lives for one lease, and its disk is capped on its own
		// (the local backend's member disk limit, a node pod's emptyDir).
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available": "50Mi", "nodefs.available": "10%", "imagefs.available": "10%",
			"nodefs.inodesFree": "5%", "imagefs.inodesFree": "5%",
		},
		// Pods run under the runtime's seccomp profile unless they name
		// another: without it they run unconfined, as root, on a kernel
		// shared with the host.
		"seccompDefault":        true,
		"shutdownGracePeriod":   "0s",
		"protectKernelDefaults": protectKernelDefaults,
	}
	if c.MaxPods > 0 {
		cfg["maxPods"] = c.MaxPods
	}
	if c.PodPidsLimit > 0 {
		cfg["podPidsLimit"] = c.PodPidsLimit
	}
	if c.ClusterDNS != "" {
		cfg["clusterDNS"] = []string{c.ClusterDNS}
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// kubeProxyConfig is kube-proxy's configuration: iptables mode in the
// node's namespace, no conntrack sysctl changes (they are machine-wide),
// NodePorts on the node's address only. Its rules follow a change of
// endpoints within 100 ms instead of the default second: a member's
// Services change rarely, and the DNSHealthy gate waits for the cluster
// DNS Service's first endpoint.
func kubeProxyConfig(c *Config, nodeIP string) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]string{"kubeconfig": c.KubeProxyKubeconfig},
		"hostnameOverride":   c.Name,
		"mode":               "iptables",
		"clusterCIDR":        c.ClusterCIDR,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"nodePortAddresses":  []string{nodeIP + "/32"},
		"conntrack":          map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
		"iptables":           map[string]any{"localhostNodePorts": false, "minSyncPeriod": proxyMinSync.String()},
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// proxyMinSync is kube-proxy's iptables.minSyncPeriod.
const proxyMinSync = 100 * time.Millisecond

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
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
