package incluster

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/node"
)

const (
	// PKIVolume is the name of the pods' volume holding the PKI Secret.
	PKIVolume = "kobe-pki"
	// PKIDir is where the machinery expects templates to mount PKIVolume.
	PKIDir = "/etc/kobe/pki"
	// podUser is the UID and GID every container runs as (the images'
	// binaries need no root; upstream images run them as root otherwise).
	podUser = 65532
	// terminationGrace is the pods' grace period when the kubelet stops
	// them on its own (a node shutting down).
	terminationGrace = 5
	// deleteGrace is the grace of Delete and Sweep: a member is destroyed,
	// never drained, and kube-apiserver takes its whole grace to stop, so
	// nothing is worth waiting for. Not 0: that would remove the pod from
	// the API before its containers are stopped.
	deleteGrace = 1
)

// renderService is the member's Service: a ClusterIP in front of its API
// port, selecting the member's pods.
func renderService(t kobev1.BackendType, m backend.Member, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta(t, m, serviceName(m)),
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP,
			// The control plane only: node pods serve no API.
			Selector: controlPlaneSelector(t, m),
			Ports: []corev1.ServicePort{{
				Name: "https", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port),
			}},
			// The API server is ready only when its etcd is: no traffic before.
			PublishNotReadyAddresses: false,
		},
	}
}

// renderEgressService is the Service of the member's node pods' egress
// proxies (PKINeeds.Egress): an address of the host cluster that stays
// valid while node pods come and go, which the control-plane pods know as
// EgressHost. A node pod whose proxy is not listening yet refuses the
// connection; the API server's caller retries.
func renderEgressService(t kobev1.BackendType, m backend.Member) *corev1.Service {
	sel := selectorFor(t, m)
	sel[LabelComponent] = ComponentNode
	return &corev1.Service{
		ObjectMeta: objectMeta(t, m, EgressServiceName(m)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: sel,
			Ports: []corev1.ServicePort{{
				Name: "egress", Protocol: corev1.ProtocolTCP, Port: node.EgressProxyPort, TargetPort: intstr.FromInt32(node.EgressProxyPort),
			}},
		},
	}
}

// renderSecret is the member's PKI Secret.
func renderSecret(t kobev1.BackendType, m backend.Member, clusterIP string, data map[string][]byte) *corev1.Secret {
	sec := &corev1.Secret{
		ObjectMeta: objectMeta(t, m, secretName(m)),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	sec.Annotations = map[string]string{AnnotationClusterIP: clusterIP}
	return sec
}

// renderNetworkPolicy keeps the member's pods to themselves: they take
// connections from each other (etcd and every other port: the API server
// reaches its node pods' egress proxies, node pods each other's kubelets,
// overlay and NodePorts), on the API port
// from the operator's pods (operatorSelector, in the member's namespace)
// and, for Direct access, from anywhere; they open connections to each
// other, and beyond only as far as the pool's cluster.egress says, never
// to the host cluster's own ranges (host) nor neverReached (egressRules).
// Its bootstrap Jobs' pods reach the API port too. Loopback inside a pod
// is never filtered, so the components of one pod talk freely.
func renderNetworkPolicy(t kobev1.BackendType, m backend.Member, port int32, operatorSelector map[string]string, host []netip.Prefix) *networkingv1.NetworkPolicy {
	own := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: selectorFor(t, m)}}}
	apiPort := []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}}
	ingress := []networkingv1.NetworkPolicyIngressRule{
		{From: own},
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: operatorSelector}}}, Ports: apiPort},
		// The member's bootstrap Jobs (BootstrapConfigs that run one).
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{kobev1.LabelBootstrapFor: string(m.UID)}}}}, Ports: apiPort},
	}
	if accessMode(m) == kobev1.AccessDirect {
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{Ports: apiPort})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: objectMeta(t, m, policyName(m)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selectorFor(t, m)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     ingress,
			Egress:      append([]networkingv1.NetworkPolicyEgressRule{{To: own}}, egressRules(m.Spec.Cluster.EffectiveEgress(), host)...),
		},
	}
}

// neverReached are the ranges no member pod reaches whatever its pool's
// egress lists, besides the host cluster's own: the local backend's
// (loopback, "this network", link-local and cloud metadata, multicast, the
// reserved top) and IPv6 loopback, link-local and multicast.
var neverReached = prefixes(append(node.NeverReachableRanges(), "::1/128", "fe80::/10", "ff00::/8"))

// notPublic are the IPv4 ranges that are not public unicast, which Public
// leaves out (node.NotPublicRanges: private, shared, documentation, the
// benchmark range...).
var notPublic = prefixes(node.NotPublicRanges())

func prefixes(cidrs []string) []netip.Prefix {
	out := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = netip.MustParsePrefix(c).Masked()
	}
	return out
}

// egressRules open the member's pods (its node pods pull images, their
// nested pods leave masqueraded to them) to what cluster.egress allows, as
// the local backend's firewall does: Public is every IPv4 address but the
// ones that are not public unicast, allowCIDRs adds its ranges. Each block
// excepts what of neverReached and of the host cluster's ranges (host: its
// pod and Service ranges and node addresses, which cover other members)
// lies inside it, and a block inside one of them is left out, so that a
// broad allowCIDRs (10.0.0.0/8) opens none of them. With a block, DNS to
// the host cluster's resolver (kube-system pods labelled k8s-app=kube-dns)
// is allowed: node pods' containerd resolves registries through it (their
// pod's resolv.conf). Member pods resolve through the member's own CoreDNS,
// which forwards nothing (internal/clusterdns), and the control plane uses
// addresses. No DNS rule otherwise: port 53 to anywhere is a tunnel out.
// None: no rule.
func egressRules(e kobev1.EgressSpec, host []netip.Prefix) []networkingv1.NetworkPolicyEgressRule {
	never := slices.Concat(neverReached, host)
	var to []networkingv1.NetworkPolicyPeer
	open := func(cidr netip.Prefix, out []netip.Prefix) {
		except, ok := exceptWithin(cidr, out)
		if !ok {
			return
		}
		b := &networkingv1.IPBlock{CIDR: cidr.Masked().String()}
		for _, p := range except {
			b.Except = append(b.Except, p.String())
		}
		to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: b})
	}
	if e.Mode == kobev1.EgressPublic {
		open(netip.MustParsePrefix("0.0.0.0/0"), slices.Concat(never, notPublic))
	}
	for _, c := range e.AllowCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue // the CRD admits CIDRs only; opening nothing is the safe side
		}
		open(p, never)
	}
	if len(to) == 0 {
		return nil
	}
	dns := []networkingv1.NetworkPolicyPort{
		{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))},
		{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(53))},
	}
	return []networkingv1.NetworkPolicyEgressRule{
		{To: to},
		{To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}}, Ports: dns},
	}
}

// exceptWithin is what of out an ipBlock of cidr must except: the ranges
// of out strictly inside cidr (the API server refuses an except that is
// not), without those inside another, sorted. ok is false when cidr lies
// inside one of out: nothing of it may be opened. Ranges of the other
// address family are disjoint from cidr.
func exceptWithin(cidr netip.Prefix, out []netip.Prefix) (except []netip.Prefix, ok bool) {
	cidr = cidr.Masked()
	var inside []netip.Prefix
	for _, o := range out {
		o = o.Masked()
		switch {
		case o.Addr().Is4() != cidr.Addr().Is4():
		case o.Bits() <= cidr.Bits() && o.Contains(cidr.Addr()):
			return nil, false
		case cidr.Contains(o.Addr()):
			inside = append(inside, o)
		}
	}
	// Widest first, so that a range's container is kept before it.
	slices.SortFunc(inside, func(a, b netip.Prefix) int {
		if a.Bits() != b.Bits() {
			return a.Bits() - b.Bits()
		}
		return a.Addr().Compare(b.Addr())
	})
	for _, p := range inside {
		if !slices.ContainsFunc(except, func(k netip.Prefix) bool { return k.Contains(p.Addr()) }) {
			except = append(except, p)
		}
	}
	slices.SortFunc(except, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return except, true
}

// accessMode is the member's resolved access mode; unset is Proxy, as for
// every backend whose members live in the host cluster.
func accessMode(m backend.Member) kobev1.AccessMode {
	if m.Spec.Access != nil && m.Spec.Access.Mode != "" {
		return m.Spec.Access.Mode
	}
	return kobev1.AccessProxy
}

// renderPDB keeps voluntary disruptions (node drains, evictions) from taking
// any of the member's pods while they are Ready: each holds part of etcd on
// an emptyDir, so an evicted pod is a destroyed member. A drain therefore
// waits until kobe recycles the member (or someone deletes its
// ClusterInstance). Pods that are not Ready may be evicted (the member is
// broken and will be reaped anyway).
func renderPDB(t kobev1.BackendType, m backend.Member, pods int) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: objectMeta(t, m, pdbName(m)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable:               ptr.To(intstr.FromInt32(int32(pods))),
			Selector:                   &metav1.LabelSelector{MatchLabels: selectorFor(t, m)},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

// finishPod completes a template's pod: identity, labels, owner, the PKI
// volume, placement and the security settings every member pod gets, and
// a control-plane pod the host alias EgressHost for egressIP (when
// set). It
// refuses a container without CPU and memory requests and limits. A node
// pod (LabelComponent ComponentNode) keeps its own security settings and
// gets only its own files, at NodeDir.
func finishPod(t kobev1.BackendType, m backend.Member, p *corev1.Pod, i int, set Settings, data map[string][]byte, egressIP string) error {
	place, nodes := set.Placement, set.Nodes
	component := componentControlPlane
	if p.Labels[LabelComponent] == ComponentNode {
		component = ComponentNode
	}
	if p.Name == "" {
		if component == ComponentNode {
			return fmt.Errorf("node pod %d has no name (NodePodName)", i)
		}
		p.Name = podName(m, i)
	}
	meta := objectMeta(t, m, p.Name)
	for k, v := range p.Labels {
		if _, ours := meta.Labels[k]; !ours {
			meta.Labels[k] = v
		}
	}
	meta.Labels[LabelComponent] = component
	meta.Annotations = p.Annotations
	p.ObjectMeta = meta

	s := &p.Spec
	s.RestartPolicy = corev1.RestartPolicyAlways
	s.AutomountServiceAccountToken = ptr.To(false)
	s.EnableServiceLinks = ptr.To(false)
	s.TerminationGracePeriodSeconds = ptr.To[int64](terminationGrace)
	for j := range s.Containers {
		if err := checkResources(&s.Containers[j]); err != nil {
			return err
		}
	}
	if component == ComponentNode {
		node := slices.Index(nodes, p.Name)
		if node < 0 {
			return fmt.Errorf("node pod %s is not among the template's nodes %v", p.Name, nodes)
		}
		items, err := nodeItems(data, node)
		if err != nil {
			return fmt.Errorf("node pod %s: %w", p.Name, err)
		}
		s.Volumes = append(s.Volumes, corev1.Volume{Name: PKIVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: secretName(m), DefaultMode: ptr.To[int32](0o400), Items: items},
		}})
		// A node pod whose supervisor exits has lost its containers (they
		// ran in its PID namespace): it ends Failed and fails the member,
		// as a lost control-plane pod does, instead of restarting empty.
		s.RestartPolicy = corev1.RestartPolicyNever
		applyPlacement(t, m, s, place, component)
		return nil
	}
	s.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](podUser), RunAsGroup: ptr.To[int64](podUser),
		FSGroup: ptr.To[int64](podUser), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	s.Volumes = append(s.Volumes, corev1.Volume{Name: PKIVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secretName(m), DefaultMode: ptr.To[int32](0o440), Items: pkiItems(data, set.FilePaths)},
	}})
	if egressIP != "" {
		s.HostAliases = append(s.HostAliases, corev1.HostAlias{IP: egressIP, Hostnames: []string{EgressHost}})
	}
	for j := range s.Containers {
		s.Containers[j].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
	applyPlacement(t, m, s, place, component)
	return nil
}

// nodeItems projects node i's files of the PKI Secret under their names in
// NodeDir; the egress proxy's when the member has them.
func nodeItems(data map[string][]byte, i int) ([]corev1.KeyToPath, error) {
	var items []corev1.KeyToPath
	files := []string{NodeConfigFile, NodeKubeletKubeconfig, NodeKubeProxyKubeconfig, NodeKubeletCert, NodeKubeletKey, NodeClientCACert, NodeOverlayKey}
	if len(data[KeyEgressCACert]) > 0 {
		files = append(files, NodeEgressCert, NodeEgressKey, NodeEgressCACert)
	}
	for _, f := range files {
		k := nodeKey(i, f)
		if len(data[k]) == 0 {
			return nil, fmt.Errorf("the PKI Secret has no %s (made before the pool asked for nodes?)", k)
		}
		items = append(items, corev1.KeyToPath{Key: k, Path: f})
	}
	return items, nil
}

// pkiItems projects the PKI Secret's keys a control-plane pod may see: not
// the operator's, nor the node pods' credentials.
func pkiItems(data map[string][]byte, paths map[string]string) []corev1.KeyToPath {
	var items []corev1.KeyToPath
	for k := range data {
		if !secretOnly[k] && !strings.HasPrefix(k, "node-") {
			p := k
			if paths[k] != "" {
				p = paths[k]
			}
			items = append(items, corev1.KeyToPath{Key: k, Path: p})
		}
	}
	sort.Slice(items, func(a, b int) bool { return items[a].Key < items[b].Key })
	return items
}

// checkResources refuses a container without CPU and memory requests and limits.
func checkResources(c *corev1.Container) error {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			return fmt.Errorf("container %s has no %s request", c.Name, r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			return fmt.Errorf("container %s has no %s limit", c.Name, r)
		}
	}
	return nil
}

// applyPlacement sets nodeSelector, tolerations, priority class and, unless
// turned off, a topology spread over kubernetes.io/hostname of the pool's
// members (ScheduleAnyway: a one-node cluster still runs them all).
func applyPlacement(t kobev1.BackendType, m backend.Member, s *corev1.PodSpec, place *kobev1.Placement, component string) {
	spread := true
	if place != nil {
		if len(place.NodeSelector) > 0 {
			s.NodeSelector = map[string]string{}
			for k, v := range place.NodeSelector {
				s.NodeSelector[k] = v
			}
		}
		s.Tolerations = append(s.Tolerations, place.Tolerations...)
		s.PriorityClassName = place.PriorityClassName
		if place.SpreadAcrossNodes != nil {
			spread = *place.SpreadAcrossNodes
		}
	}
	if spread {
		s.TopologySpreadConstraints = append(s.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew:           1,
			TopologyKey:       corev1.LabelHostname,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				LabelManagedBy: ManagedBy, LabelBackend: string(t), kobev1.LabelPool: truncLabel(m.Pool),
				LabelComponent: component,
			}},
		})
	}
}

// Resources returns r with every CPU and memory request and limit that r
// lacks taken from def, and any other resource def names (ephemeral
// storage); a limit below its request is raised to the request, so a pool
// that asks for more than a default limit still gets a valid spec.
func Resources(r *corev1.ResourceRequirements, def corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if r != nil {
		for k, v := range r.Requests {
			out.Requests[k] = v.DeepCopy()
		}
		for k, v := range r.Limits {
			out.Limits[k] = v.DeepCopy()
		}
	}
	names := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}
	for _, list := range []corev1.ResourceList{def.Requests, def.Limits} {
		for k := range list {
			if !slices.Contains(names, k) {
				names = append(names, k)
			}
		}
	}
	for _, k := range names {
		if _, ok := out.Requests[k]; !ok {
			if lim, hasLim := out.Limits[k]; hasLim && lim.Cmp(def.Requests[k]) < 0 {
				out.Requests[k] = lim.DeepCopy() // a pool's limit below kobe's request wins
			} else {
				out.Requests[k] = def.Requests[k].DeepCopy()
			}
		}
		if _, ok := out.Limits[k]; !ok {
			lim := def.Limits[k].DeepCopy()
			if req := out.Requests[k]; lim.Cmp(req) < 0 {
				lim = req.DeepCopy()
			}
			out.Limits[k] = lim
		}
	}
	return out
}
