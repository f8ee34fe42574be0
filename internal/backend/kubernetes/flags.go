package kubernetes

import (
	"flag"
	"fmt"
	"net/netip"
	"path"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
)

// Flags are the operator's flags of the kubernetes backend and of what
// its members need from the host cluster.
type Flags struct {
	// Disable leaves the backend unwired (--disable-kubernetes-backend).
	Disable bool
	// OperatorSelector is Options.OperatorSelector as k=v,...
	OperatorSelector string
	// RequireNetworkPolicyEnforcement holds members back until the host
	// cluster's CNI is proven to enforce NetworkPolicy (the pool
	// controller's RequireNetworkPolicy).
	RequireNetworkPolicyEnforcement bool
	// BootstrapJobs runs the Jobs of BootstrapConfigs for this backend's
	// members (the pool and instance controllers' BootstrapJobs).
	BootstrapJobs bool
	// DefaultNodes is Options.DefaultNodes.
	DefaultNodes backend.NodesDefault
	// NodePreload is Options.NodePreload, comma-separated.
	NodePreload string
	// HostCIDRs is Options.HostRanges: CIDRs and "auto", comma-separated.
	HostCIDRs string
}

// Bind registers the flags on fs with their defaults.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.Disable, "disable-kubernetes-backend", false, "Do not wire the kubernetes backend (members as etcd, kube-apiserver and kube-controller-manager pods in --namespace of the host cluster).")
	fs.BoolVar(&f.RequireNetworkPolicyEnforcement, "require-network-policy-enforcement", true, "Kubernetes backend pools build and hand out members only once a probe (pods in --namespace, the pool's etcd image) proved that the host cluster's CNI enforces NetworkPolicy, on which each member's isolation rests. false: members are handed out on a CNI that does not enforce it (not isolated from each other or from the host cluster's pods); pools still report the verdict (condition NetworkPolicyEnforced).")
	fs.StringVar(&f.OperatorSelector, "member-network-policy-operator-selector", "app.kubernetes.io/name=kobe", "Labels (k=v,...) of the operator's pods: each kubernetes-backend member's NetworkPolicy lets only them (and, for Direct access, anyone) reach its API port. The default matches the chart's pods.")
	f.DefaultNodes = backend.NodesDefault{Auto: true}
	fs.Var(&f.DefaultNodes, "kubernetes-default-nodes", "Node pods of a kubernetes backend member whose pool leaves backend.kubernetes.nodes unset: auto (1, or 0 when the member's version is older than the kubelet of kobe's node image and the pool names no images.node; the pool's Nodes condition says why) or a number from 0 to 4.")
	fs.StringVar(&f.NodePreload, "kubernetes-node-preload", "", "Image archives that every node pod imports into its containerd at start, besides the pause and CoreDNS images: absolute paths inside the node image, comma-separated (make image-node NODE_PRELOAD=... puts archives in /usr/local/share/kobe-node/images/). Members' pods then run those images without a registry (imagePullPolicy Never or IfNotPresent). Every node image the pools run must hold them: a node missing one fails.")
	fs.StringVar(&f.HostCIDRs, "kubernetes-host-cidrs", "auto", "The host cluster's pod and Service ranges and node addresses, which kubernetes backend members' pods never reach whatever their pool's cluster.egress lists (each member's NetworkPolicy excepts them): CIDRs and auto, comma-separated. auto reads them from the host cluster when a member whose egress opens anything is built (cached a minute; needs list on nodes and servicecidrs): each Node's spec.podCIDRs and InternalIP and ExternalIP, each ServiceCIDR's ranges. Add the pod range when the CNI does not allocate it through Nodes' podCIDRs (Calico's or Cilium's own IPAM), or list everything without auto where the operator may not list Nodes.")
	fs.BoolVar(&f.BootstrapJobs, "bootstrap-jobs", false, "Run the Jobs of BootstrapConfigs (in the operator's namespace of the host cluster, which must have nodes) for kubernetes backend members. Without it a pool naming a Job bundle builds no member and says why.")
}

// Validate refuses an operator selector that is not k=v,...; with the
// backend disabled nothing reads it.
func (f Flags) Validate() error {
	if f.Disable {
		return nil
	}
	if _, err := f.operatorSelector(); err != nil {
		return err
	}
	if _, _, err := f.hostCIDRs(); err != nil {
		return err
	}
	_, err := f.nodePreload()
	return err
}

// Options are the backend's Options from the flags: c is its uncached
// client and namespace the operator's.
func (f Flags) Options(c client.Client, namespace string, log logr.Logger) (Options, error) {
	sel, err := f.operatorSelector()
	if err != nil {
		return Options{}, err
	}
	preload, err := f.nodePreload()
	if err != nil {
		return Options{}, err
	}
	static, auto, err := f.hostCIDRs()
	if err != nil {
		return Options{}, err
	}
	host := &incluster.HostRanges{Static: static}
	if auto {
		host.Reader = c
	}
	return Options{Client: c, Namespace: namespace, OperatorSelector: sel, Log: log, DefaultNodes: f.DefaultNodes, NodePreload: preload,
		HostRanges: host}, nil
}

// hostCIDRs splits --kubernetes-host-cidrs into its CIDRs (masked) and
// whether it says auto.
func (f Flags) hostCIDRs() (cidrs []netip.Prefix, auto bool, err error) {
	for c := range strings.SplitSeq(f.HostCIDRs, ",") {
		c = strings.TrimSpace(c)
		switch c {
		case "":
			continue
		case "auto":
			auto = true
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, false, fmt.Errorf("--kubernetes-host-cidrs: %q is neither a CIDR nor auto", c)
		}
		cidrs = append(cidrs, p.Masked())
	}
	return cidrs, auto, nil
}

// nodePreload splits --kubernetes-node-preload: absolute, clean paths (the
// node image's, not the operator's: nothing checks that they exist here).
func (f Flags) nodePreload() ([]string, error) {
	var paths []string
	for p := range strings.SplitSeq(f.NodePreload, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !path.IsAbs(p) || path.Clean(p) != p {
			return nil, fmt.Errorf("--kubernetes-node-preload: %q is not an absolute, clean path inside the node image", p)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func (f Flags) operatorSelector() (labels.Set, error) {
	sel, err := labels.ConvertSelectorToLabelsMap(f.OperatorSelector)
	if err != nil {
		return nil, fmt.Errorf("--member-network-policy-operator-selector: %w", err)
	}
	return sel, nil
}
