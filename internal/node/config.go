// Package node runs one real Kubernetes node of a local member: containerd,
// kubelet and kube-proxy in a network and mount namespace of their own, so
// that several nodes on one host do not collide on ports, iptables chains,
// cni0, kubelet's fixed paths or routes, and a node never sees the other
// members' files. The local backend starts the kobe-node program
// (cmd/kobe-node) in fresh namespaces with a Config; kobe-node sets the
// namespaces up from the inside and supervises the three daemons.
package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Config is everything kobe-node needs, written by the local backend as
// <Dir>/node.json before kobe-node starts. Paths are absolute host paths.
type Config struct {
	// Name is the node's name in the member (also its hostname in logs).
	Name string `json:"name"`
	// Dir is the node's own directory: containerd's root and state, the
	// kubelet root, pod logs, CNI state, configs and certificates.
	Dir string `json:"dir"`
	// HideDirs are covered by an empty tmpfs in the node's mount namespace
	// (the local backend's data root: other members' keys), after which
	// Dir is bound back at its own path.
	HideDirs []string `json:"hideDirs,omitempty"`

	// Interface is the node's end of the veth pair the local backend
	// creates into the node's network namespace ("eth0"); kobe-node waits
	// for it, then gives it Address and a default route via Gateway.
	// Empty in a node pod (in-cluster backends): the pod's network is used
	// as it is, Address, Gateway and PeerRoutes are then empty too, and the
	// node IP is the pod's first non-loopback IPv4 address.
	Interface string `json:"interface,omitempty"`
	// Address is the node's IP with the link's prefix (198.19.x.y/24).
	Address string `json:"address"`
	// Gateway is the host's address on the member's bridge, where the
	// member's API server listens.
	Gateway string `json:"gateway"`
	// PeerRoutes send the other nodes' pod ranges of the same member
	// straight to them over the member's bridge.
	PeerRoutes []Route `json:"peerRoutes,omitempty"`

	// OverlayKeyFile is the member's overlay key, the same in each of its
	// node pods and nowhere else (overlay.go): with it, a node pod connects
	// its pod range to the other node pods of its member through a VXLAN
	// overlay, learning them from statements on their Nodes that the key
	// authenticates. Only in a node pod (no Interface).
	OverlayKeyFile string `json:"overlayKeyFile,omitempty"`

	// EgressProxy, in a node pod only (no Interface), serves the member's
	// API server a way into the member's network (egressproxy.go).
	EgressProxy *EgressProxy `json:"egressProxy,omitempty"`

	// PodCIDR is this node's pod range (a /24 of 198.18.128.0/17).
	PodCIDR string `json:"podCIDR"`
	// ClusterCIDR is the member's pod range (all its nodes), for kube-proxy.
	ClusterCIDR string `json:"clusterCIDR"`
	// ClusterDNS is the member's DNS Service address, the nameserver
	// kubelet gives pods (internal/clusterdns); empty: pods get no DNS.
	ClusterDNS string `json:"clusterDNS,omitempty"`

	// CgroupParent is the cgroup, relative to every hierarchy's root
	// ("kobe/<member uid>/<node>"), that kobe-node creates and moves itself
	// into before starting anything, and that kubelet uses as its cgroup
	// root: every process of the node, containers included, is under it.
	// Empty in a node pod: kubelet's cgroup root is then a child of the
	// cgroup kobe-node runs in (read from /proc/self/cgroup).
	CgroupParent string `json:"cgroupParent,omitempty"`

	// Containerd, Ctr, KubeletBin and KubeProxyBin are the binaries;
	// CNIBinDir holds the CNI plugins (bridge, host-local, portmap, loopback).
	Containerd   string `json:"containerd"`
	Ctr          string `json:"ctr"`
	KubeletBin   string `json:"kubelet"`
	KubeProxyBin string `json:"kubeProxy"`
	CNIBinDir    string `json:"cniBinDir"`

	// KubeletKubeconfig and KubeProxyKubeconfig point at the member's API
	// server (https://Gateway:port) with the node's client certificates.
	KubeletKubeconfig   string `json:"kubeletKubeconfig"`
	KubeProxyKubeconfig string `json:"kubeProxyKubeconfig"`
	// KubeletCert and KubeletKey are kubelet's serving certificate;
	// ClientCAFile is the member's client CA, which kubelet trusts for
	// the API server's requests (logs, exec, port-forward).
	KubeletCert  string `json:"kubeletCert"`
	KubeletKey   string `json:"kubeletKey"`
	ClientCAFile string `json:"clientCAFile"`

	// RegistryMirrors maps a registry host ("docker.io", "*" for all) to
	// the mirror URLs containerd pulls its images from first.
	RegistryMirrors map[string][]string `json:"registryMirrors,omitempty"`

	// PauseImage is containerd's sandbox image; it must be in Images.
	PauseImage string `json:"pauseImage"`
	// Images are image archives imported into containerd's k8s.io
	// namespace before kubelet starts (the pause image's first).
	Images []string `json:"images"`

	// MaxPods caps the pods kubelet admits.
	MaxPods int32 `json:"maxPods,omitempty"`
	// PodPidsLimit caps the processes and threads of one pod (kubelet's
	// podPidsLimit; 0: none): the member's cluster.limits.podProcesses.
	PodPidsLimit int64 `json:"podPidsLimit,omitempty"`
	// PidsMax caps the processes and threads of the node as a whole,
	// kubelet and containerd included (pids.max of the node's cgroup; 0:
	// none). In a node pod, whose cgroup the host's kubelet made, the
	// agent writes it on the cgroup it starts everything in; a local
	// member's nodes are bounded by the member's cgroup instead.
	PidsMax int64 `json:"pidsMax,omitempty"`
	// PodsPidsMax and PodsMemoryMax cap the node's pods together (the
	// cgroup kubelet runs them in, below the node's; 0: none), below the
	// node's own limits, so that its daemons keep a reserve (PodsShare).
	PodsPidsMax   int64 `json:"podsPidsMax,omitempty"`
	PodsMemoryMax int64 `json:"podsMemoryMax,omitempty"`
}

// PodsLimits are the limits of the node's pods' cgroup.
func (c *Config) PodsLimits() CgroupLimits {
	return CgroupLimits{MemoryBytes: c.PodsMemoryMax, Pids: c.PodsPidsMax}
}

// PodsShare is what the pods of a node whose cgroup has limits l may take
// together: all but a reserve for the node's daemons (a quarter, at most
// 256 tasks and 256 MiB).
func PodsShare(l CgroupLimits) CgroupLimits {
	if l.Pids > 0 {
		l.Pids -= min(256, l.Pids/4)
	}
	if l.MemoryBytes > 0 {
		l.MemoryBytes -= min(256<<20, l.MemoryBytes/4)
	}
	return l
}

// Route is a destination range reached through a gateway on the link.
type Route struct {
	Dst string `json:"dst"`
	Via string `json:"via"`
}

// ConfigFile is the name of the Config in the node's directory.
const ConfigFile = "node.json"

// Validate checks what kobe-node relies on before it touches anything.
func (c *Config) Validate() error {
	var errs []error
	if c.PidsMax < 0 || c.PodPidsLimit < 0 || c.PodsPidsMax < 0 || c.PodsMemoryMax < 0 {
		errs = append(errs, errors.New("pidsMax, podPidsLimit, podsPidsMax and podsMemoryMax must not be negative"))
	}
	if c.Name == "" {
		errs = append(errs, errors.New("name is empty"))
	}
	for what, p := range map[string]string{
		"dir": c.Dir, "containerd": c.Containerd, "ctr": c.Ctr, "kubelet": c.KubeletBin,
		"kubeProxy": c.KubeProxyBin, "cniBinDir": c.CNIBinDir,
		"kubeletKubeconfig": c.KubeletKubeconfig, "kubeProxyKubeconfig": c.KubeProxyKubeconfig,
		"kubeletCert": c.KubeletCert, "kubeletKey": c.KubeletKey, "clientCAFile": c.ClientCAFile,
	} {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s %q is not an absolute path", what, p))
		}
	}
	for _, p := range c.HideDirs {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("hideDirs entry %q is not an absolute path", p))
		}
	}
	if c.OverlayKeyFile != "" && (c.Interface != "" || !filepath.IsAbs(c.OverlayKeyFile)) {
		errs = append(errs, fmt.Errorf("overlayKeyFile %q: an absolute path, in a node pod only (no interface)", c.OverlayKeyFile))
	}
	if c.EgressProxy != nil {
		if c.Interface != "" {
			errs = append(errs, errors.New("egressProxy is for a node pod only (no interface)"))
		}
		errs = append(errs, c.EgressProxy.validate())
	}
	if c.Interface == "" {
		if c.Address != "" || c.Gateway != "" || len(c.PeerRoutes) > 0 {
			errs = append(errs, errors.New("address, gateway and peerRoutes need an interface"))
		}
	} else {
		if _, err := netip.ParsePrefix(c.Address); err != nil {
			errs = append(errs, fmt.Errorf("address: %w", err))
		}
		if _, err := netip.ParseAddr(c.Gateway); err != nil {
			errs = append(errs, fmt.Errorf("gateway: %w", err))
		}
	}
	for _, s := range []string{c.PodCIDR, c.ClusterCIDR} {
		if _, err := netip.ParsePrefix(s); err != nil {
			errs = append(errs, fmt.Errorf("pod range: %w", err))
		}
	}
	if c.ClusterDNS != "" {
		if _, err := netip.ParseAddr(c.ClusterDNS); err != nil {
			errs = append(errs, fmt.Errorf("clusterDNS: %w", err))
		}
	}
	for _, r := range c.PeerRoutes {
		if _, err := netip.ParsePrefix(r.Dst); err != nil {
			errs = append(errs, fmt.Errorf("peer route: %w", err))
		}
		if _, err := netip.ParseAddr(r.Via); err != nil {
			errs = append(errs, fmt.Errorf("peer route: %w", err))
		}
	}
	if c.CgroupParent != "" && (filepath.IsAbs(c.CgroupParent) || filepath.Clean(c.CgroupParent) != c.CgroupParent || c.CgroupParent == ".." || strings.HasPrefix(c.CgroupParent, "../")) {
		errs = append(errs, fmt.Errorf("cgroupParent %q must be a clean relative path", c.CgroupParent))
	}
	if c.PauseImage == "" || len(c.Images) == 0 {
		errs = append(errs, errors.New("pauseImage and images (with the pause image's archive) are required"))
	}
	return errors.Join(errs...)
}

// WriteConfig writes c as <c.Dir>/node.json.
func WriteConfig(c *Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, ConfigFile), b, 0o600)
}

// ReadConfig reads and validates a Config.
func ReadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}
