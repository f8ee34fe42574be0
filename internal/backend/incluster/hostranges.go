package incluster

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hostRangesTTL is how long HostRanges uses what it read: a Node list per
// member would cost the host's API server more than a node that joined a
// minute ago left out of a policy.
const hostRangesTTL = time.Minute

// HostRanges are the host cluster's own addresses, which a member's pods
// never reach whatever their pool's egress lists (an allowCIDRs of
// 10.0.0.0/8 must open neither the host's pods, other members included,
// nor its Services nor its nodes' kubelets): Static, from the operator's
// flags, and, with a Reader, what the host cluster says: each Node's
// spec.podCIDRs and InternalIP and ExternalIP addresses, and each
// ServiceCIDR's ranges. A pod range that the CNI allocates outside Node
// podCIDRs (Calico's or Cilium's own IPAM) is known from Static only.
type HostRanges struct {
	// Static are ranges known without asking.
	Static []netip.Prefix
	// Reader lists Nodes and ServiceCIDRs; nil: Static only.
	Reader client.Reader

	mu    sync.Mutex
	at    time.Time
	found []netip.Prefix
}

// Ranges are the host cluster's ranges at now: a failure to read them is
// an error, never fewer ranges.
func (h *HostRanges) Ranges(ctx context.Context, now time.Time) ([]netip.Prefix, error) {
	if h == nil {
		return nil, nil
	}
	if h.Reader == nil {
		return h.Static, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.found != nil && now.Sub(h.at) < hostRangesTTL {
		return h.found, nil
	}
	found := slices.Clone(h.Static)
	var nodes corev1.NodeList
	if err := h.Reader.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing the host cluster's Nodes (their pod ranges and addresses): %w", err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				found = append(found, p.Masked())
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				ip = ip.Unmap()
				found = append(found, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := h.Reader.List(ctx, &cidrs); err != nil {
		return nil, fmt.Errorf("listing the host cluster's ServiceCIDRs: %w", err)
	}
	for _, sc := range cidrs.Items {
		for _, c := range sc.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				found = append(found, p.Masked())
			}
		}
	}
	h.found, h.at = found, now
	return found, nil
}
