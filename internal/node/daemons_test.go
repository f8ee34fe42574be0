package node

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

func testConfig() *Config {
	return &Config{
		Name: "node-0", Dir: "/data/m/nodes/0", HideDirs: []string{"/data"},
		Interface: "eth0", Address: "198.19.192.10/24", Gateway: "198.19.192.1",
		PeerRoutes: []Route{{Dst: "198.18.129.0/24", Via: "198.19.192.11"}},
		PodCIDR:    "198.18.128.0/24", ClusterCIDR: "198.18.128.0/22", ClusterDNS: "198.19.128.10", CgroupParent: "kobe/u/n0",
		Containerd: "/usr/bin/containerd", Ctr: "/usr/bin/ctr", KubeletBin: "/b/kubelet", KubeProxyBin: "/b/kube-proxy",
		CNIBinDir: "/usr/lib/cni", KubeletKubeconfig: "/data/m/nodes/0/kubelet.kubeconfig",
		KubeProxyKubeconfig: "/data/m/nodes/0/kube-proxy.kubeconfig", KubeletCert: "/data/m/nodes/0/c.crt",
		KubeletKey: "/data/m/nodes/0/c.key", ClientCAFile: "/data/m/nodes/0/ca.crt",
		PauseImage: "kobe.local/pause:v1", Images: []string{"/img/pause.tar"},
	}
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"relative dir":        func(c *Config) { c.Dir = "nodes/0" },
		"escaping cgroup":     func(c *Config) { c.CgroupParent = "../kobe" },
		"absolute cgroup":     func(c *Config) { c.CgroupParent = "/kobe" },
		"unclean cgroup":      func(c *Config) { c.CgroupParent = "kobe//u" },
		"bad address":         func(c *Config) { c.Address = "198.19.192.10" },
		"no pause image":      func(c *Config) { c.Images = nil },
		"address, no link":    func(c *Config) { c.Interface = "" },
		"relative hidden dir": func(c *Config) { c.HideDirs = []string{"data"} },
		"bad peer route":      func(c *Config) { c.PeerRoutes = []Route{{Dst: "x", Via: "198.19.192.11"}} },
	} {
		c := testConfig()
		mutate(c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDaemonConfigs(t *testing.T) {
	c := testConfig()
	ctrd := containerdConfig(c, "/run/kobe-node/containerd.sock")
	for _, want := range []string{
		`root = "/data/m/nodes/0/containerd/root"`, `sandbox_image = "kobe.local/pause:v1"`,
		"restrict_oom_score_adj = true", `address = "/run/kobe-node/containerd.sock"`,
		`conf_dir = "/data/m/nodes/0/cni/net.d"`, `bin_dir = "/usr/lib/cni"`, `Root = "/data/m/nodes/0/runc"`,
	} {
		if !strings.Contains(ctrd, want) {
			t.Errorf("containerd config lacks %s:\n%s", want, ctrd)
		}
	}

	var cni struct {
		Plugins []map[string]any `json:"plugins"`
	}
	b, err := cniConfig(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cni); err != nil {
		t.Fatal(err)
	}
	br := cni.Plugins[0]
	if br["bridge"] != "cni0" || br["hairpinMode"] != true || br["ipMasq"] != false || br["isGateway"] != true {
		t.Errorf("bridge plugin: %v", br)
	}
	if _, set := br["mtu"]; set {
		t.Errorf("bridge plugin without an overlay sets an MTU: %v", br)
	}
	// A node pod's pods fit in its overlay: the link's MTU less the
	// encapsulation.
	b, err = cniConfig(c, 1450)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cni); err != nil {
		t.Fatal(err)
	}
	if mtu := cni.Plugins[0]["mtu"]; mtu != float64(1450) {
		t.Errorf("bridge plugin's mtu %v, want 1450", mtu)
	}
	if !strings.Contains(string(b), `"subnet": "198.18.128.0/24"`) || !strings.Contains(string(b), `"dataDir": "/data/m/nodes/0/cni/ipam"`) {
		t.Errorf("CNI ipam: %s", b)
	}

	var kl map[string]any
	b, err = kubeletConfig(c, "198.19.192.10", "/kobe/u/n0", "/run/kobe-node/containerd.sock", "/data/m/nodes/0/pod-logs", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &kl); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"cgroupRoot": "/kobe/u/n0", "cgroupDriver": "cgroupfs", "failCgroupV1": false, "address": "198.19.192.10",
		"podCIDR": "198.18.128.0/24", "resolvConf": "", "protectKernelDefaults": false, "readOnlyPort": float64(0),
		"tlsCertFile": c.KubeletCert, "containerRuntimeEndpoint": "unix:///run/kobe-node/containerd.sock",
		"seccompDefault": true,
	} {
		if kl[k] != want {
			t.Errorf("kubelet %s = %v, want %v", k, kl[k], want)
		}
	}
	// The disk is shared with the host: eviction starts well before it is
	// full...
	for k, min := range map[string]float64{"nodefs.available": 10, "imagefs.available": 10, "nodefs.inodesFree": 5, "imagefs.inodesFree": 5} {
		v, _ := kl["evictionHard"].(map[string]any)[k].(string)
		pct, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err != nil || !strings.HasSuffix(v, "%") || pct < min {
			t.Errorf("kubelet evictionHard %s = %q, want at least %v%%", k, v, min)
		}
	}
	// ...but images are never collected: preloaded ones cannot be pulled
	// again by a member without egress.
	if high, low := kl["imageGCHighThresholdPercent"].(float64), kl["imageGCLowThresholdPercent"].(float64); high != 100 || low >= high {
		t.Errorf("kubelet image collection at %v%%, down to %v%%; want it off (100)", high, low)
	}
	// Pods resolve through the member's DNS Service, and only through it.
	if dns, _ := kl["clusterDNS"].([]any); len(dns) != 1 || dns[0] != "198.19.128.10" || kl["clusterDomain"] != "cluster.local" {
		t.Errorf("kubelet clusterDNS = %v, clusterDomain = %v; want [198.19.128.10], cluster.local", kl["clusterDNS"], kl["clusterDomain"])
	}
	if authn := kl["authentication"].(map[string]any); authn["anonymous"].(map[string]any)["enabled"] != false ||
		authn["x509"].(map[string]any)["clientCAFile"] != c.ClientCAFile {
		t.Errorf("kubelet authentication: %v", authn)
	}
	// A kubelet must not keep accepting a released lease's certificate or
	// tokens from a cached answer of the member's API server. 0 (or unset)
	// would give kubelet's defaults: minutes.
	if mode := field(kl, "authorization", "mode"); mode != "Webhook" {
		t.Errorf("kubelet authorization.mode = %v, want Webhook", mode)
	}
	for _, path := range [][]string{
		{"authentication", "webhook", "cacheTTL"},
		{"authorization", "webhook", "cacheAuthorizedTTL"},
		{"authorization", "webhook", "cacheUnauthorizedTTL"},
	} {
		v := field(kl, path...)
		s, _ := v.(string)
		if d, err := time.ParseDuration(s); err != nil || d <= 0 || d > 100*time.Millisecond {
			t.Errorf("kubelet %s = %v, want a positive duration of at most 100ms", strings.Join(path, "."), v)
		}
	}

	var kp map[string]any
	b, err = kubeProxyConfig(c, "198.19.192.10")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &kp); err != nil {
		t.Fatal(err)
	}
	if kp["mode"] != "iptables" || kp["clusterCIDR"] != c.ClusterCIDR || kp["hostnameOverride"] != "node-0" {
		t.Errorf("kube-proxy config: %v", kp)
	}
	if ipt, _ := kp["iptables"].(map[string]any); ipt["minSyncPeriod"] != "100ms" {
		t.Errorf("kube-proxy iptables = %v, want minSyncPeriod 100ms", kp["iptables"])
	}
	for k, v := range kp["conntrack"].(map[string]any) {
		if v != float64(0) && v != "0s" {
			t.Errorf("kube-proxy conntrack %s = %v: it would change a machine-wide sysctl", k, v)
		}
	}
}

func TestValidRel(t *testing.T) {
	for _, bad := range []string{"", "/kobe", "..", "../x", "kobe/../..", "kobe/"} {
		if validRel(bad) == nil {
			t.Errorf("validRel(%q) accepted", bad)
		}
	}
	if err := validRel("kobe/u/n0"); err != nil {
		t.Error(err)
	}
}

// field is the value at path in a decoded JSON object, nil if there is none.
func field(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

// Registry mirrors reach containerd's CRI configuration, one table per
// registry in a stable order, every name and URL a quoted TOML string.
func TestContainerdMirrors(t *testing.T) {
	cfg := ContainerdConfig(ContainerdSettings{Dir: "/d", Socket: "/s", PauseImage: "p", CNIBinDir: "/c", CNIConfDir: "/n", Mirrors: map[string][]string{
		"docker.io": {"https://mirror.internal:5000", "http://10.1.2.3:5000/v2-cache"},
		"*":         {"https://all.example"},
	}})
	want := `  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."*"]
    endpoint = ["https://all.example"]
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
    endpoint = ["https://mirror.internal:5000", "http://10.1.2.3:5000/v2-cache"]
`
	if !strings.HasSuffix(cfg, want) {
		t.Errorf("containerd config ends\n%s\nwant it to end\n%s", cfg[max(0, len(cfg)-len(want)-80):], want)
	}
	if none := ContainerdConfig(ContainerdSettings{Dir: "/d"}); strings.Contains(none, "registry") || !strings.HasSuffix(none, "\n") {
		t.Errorf("without mirrors: %q", none[max(0, len(none)-120):])
	}
}
