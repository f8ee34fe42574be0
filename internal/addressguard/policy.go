package addressguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// PolicyName is the static policy's name; the suffix marks policies loaded
// from files, which the API can neither show nor remove.
const PolicyName = "kobe-member-addresses.static.k8s.io"

// APIServerFlags are the kube-apiserver flags the policy relies on. With
// aggregator routing the API server reaches the Service of a webhook, a
// conversion webhook or an aggregated API at one of its endpoints, which
// the policy holds to the member's pods. Without it the API server dials
// the Service's cluster IP, which a holder picks inside the Service range
// and which the API server, outside the member's pod network, reaches only
// through the host's routes; and for an ExternalName Service it dials
// whatever name the holder wrote (localhost, a metadata server). With it
// ExternalName Services are only DNS names for the member's pods, as
// upstream conformance expects them to be.
func APIServerFlags() []string {
	return []string{"--enable-aggregator-routing=true"}
}

// Ranges says which addresses belong to a member.
type Ranges struct {
	// Pods are the ranges pod IPs come from: the member's pod network and,
	// for hostNetwork pods, its nodes' link. Empty: a member without nodes,
	// whose pods never get an address.
	Pods []netip.Prefix
	// Nodes are the ranges of nodes' InternalIP and ExternalIP addresses.
	Nodes []netip.Prefix
	// Host is the host's own address inside those ranges (the member's
	// gateway), which no pod or node may claim; invalid when there is none.
	Host netip.Addr
	// APIServer is the only endpoint the "kubernetes" Service of namespace
	// default may name. An invalid address allows any address, but only at
	// the API server's port.
	APIServer netip.AddrPort
}

func (r Ranges) validate() error {
	if r.APIServer.Port() == 0 {
		return errors.New("the API server's port is not set")
	}
	for _, p := range append(append([]netip.Prefix{}, r.Pods...), r.Nodes...) {
		if !p.IsValid() {
			return fmt.Errorf("range %v is not a prefix", p)
		}
	}
	return nil
}

// Policy renders the ValidatingAdmissionPolicy and its binding as one
// multi-document YAML file for the API server's staticManifestsDir.
func Policy(r Ranges) ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("member address ranges: %w", err)
	}
	fail := admissionv1.Fail
	policy := admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{
				rule("", "pods", "pods/status", "nodes", "nodes/status", "endpoints"),
				rule("discovery.k8s.io", "endpointslices"),
				rule("admissionregistration.k8s.io", "validatingwebhookconfigurations", "mutatingwebhookconfigurations"),
				rule("apiextensions.k8s.io", "customresourcedefinitions"),
			}},
			Validations: validations(r),
		},
	}
	binding := admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        PolicyName,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	var out []byte
	for i, obj := range []any{policy, binding} {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", PolicyName, err)
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, data...)
	}
	return out, nil
}

func rule(group string, resources ...string) admissionv1.NamedRuleWithOperations {
	all := admissionv1.AllScopes
	return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule: admissionv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources, Scope: &all,
		},
	}}
}

// validations are the policy's rules. Each starts by naming the resource it
// is about, so that it holds for that resource and passes all others.
func validations(r Ranges) []admissionv1.Validation {
	pod := func(x string) string { return within(x, r.Pods, r.Host) }
	node := func(x string) string { return within(x, r.Nodes, r.Host) }
	apiAddr := func(x string) string {
		if !r.APIServer.Addr().IsValid() {
			return "true"
		}
		return fmt.Sprintf("(isIP(%s) && ip(%s) == ip('%s'))", x, x, r.APIServer.Addr())
	}
	port := strconv.Itoa(int(r.APIServer.Port()))
	// absent is true for a list field that is missing or null: the
	// EndpointSlice controller writes "endpoints": null for a Service
	// without ready pods, which has() reports present and all() cannot
	// iterate (the refusal would leave such Services without a slice).
	absent := func(f string) string { return fmt.Sprintf("(!has(%[1]s) || type(%[1]s) == null_type)", f) }
	addrs := func(list string, in func(string) string) string {
		return fmt.Sprintf("(%s || s.%s.all(a, %s))", absent("s."+list), list, in("a.ip"))
	}
	ranges := func(ps []netip.Prefix) string {
		if len(ps) == 0 {
			return "none"
		}
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.String()
		}
		return strings.Join(s, ", ")
	}
	isKubernetes := "request.namespace == 'default'"
	return []admissionv1.Validation{{
		Expression: "request.resource.resource != 'pods' || !has(object.status) || " +
			"((!has(object.status.podIP) || object.status.podIP == '' || " + pod("object.status.podIP") + ") && " +
			"(!has(object.status.podIPs) || object.status.podIPs.all(p, " + pod("p.ip") + ")))",
		Message: "a pod's status.podIP and status.podIPs must be addresses of this member's pod network (" + ranges(r.Pods) + "): the member's API server connects to them",
	}, {
		Expression: "request.resource.resource != 'nodes' || !has(object.status) || !has(object.status.addresses) || " +
			"object.status.addresses.all(a, !(a.type in ['InternalIP', 'ExternalIP']) || " + node("a.address") + ")",
		Message: "a node's InternalIP and ExternalIP addresses must be addresses of this member's node network (" + ranges(r.Nodes) + "): the member's API server connects to them",
	}, {
		Expression: "request.resource.resource != 'endpoints' || " + absent("object.subsets") + " || " +
			"(" + isKubernetes + " && object.metadata.name == 'kubernetes' ? " +
			"object.subsets.all(s, (" + absent("s.ports") + " || s.ports.all(p, p.port == " + port + ")) && " + addrs("addresses", apiAddr) + " && " + addrs("notReadyAddresses", apiAddr) + ") : " +
			"object.subsets.all(s, " + addrs("addresses", pod) + " && " + addrs("notReadyAddresses", pod) + "))",
		Message: "Endpoints may only name addresses of this member's pods (" + ranges(r.Pods) + "), and those of Service default/kubernetes only the member's API server: the member's API server connects to them",
	}, {
		Expression: "request.resource.resource != 'endpointslices' || (object.addressType != 'FQDN' && " +
			"(" + absent("object.endpoints") + " || (" + isKubernetes + " && has(object.metadata.labels) && 'kubernetes.io/service-name' in object.metadata.labels && object.metadata.labels['kubernetes.io/service-name'] == 'kubernetes' ? " +
			"(" + absent("object.ports") + " || object.ports.all(p, has(p.port) && p.port == " + port + ")) && object.endpoints.all(e, e.addresses.all(x, " + apiAddr("x") + ")) : " +
			"object.endpoints.all(e, e.addresses.all(x, " + pod("x") + ")))))",
		Message: "EndpointSlices may only name addresses of this member's pods (" + ranges(r.Pods) + ") and never FQDNs, and those of Service default/kubernetes only the member's API server: the member's API server connects to them",
	}, {
		Expression: "!(request.resource.resource in ['validatingwebhookconfigurations', 'mutatingwebhookconfigurations']) || !has(object.webhooks) || " +
			"object.webhooks.all(w, !has(w.clientConfig.url))",
		Message: "admission webhooks must name a Service of this member (clientConfig.service), not a URL: the member's API server reaches nothing outside its member",
	}, {
		Expression: "request.resource.resource != 'customresourcedefinitions' || !has(object.spec.conversion) || !has(object.spec.conversion.webhook) || " +
			"!has(object.spec.conversion.webhook.clientConfig) || !has(object.spec.conversion.webhook.clientConfig.url)",
		Message: "conversion webhooks must name a Service of this member (clientConfig.service), not a URL: the member's API server reaches nothing outside its member",
	}}
}

// within is a CEL expression: x (a string) is an IP address inside one of
// ps and is not host.
func within(x string, ps []netip.Prefix, host netip.Addr) string {
	if len(ps) == 0 {
		return "false"
	}
	in := make([]string, len(ps))
	for i, p := range ps {
		in[i] = fmt.Sprintf("cidr('%s').containsIP(%s)", p.Masked(), x)
	}
	expr := fmt.Sprintf("isIP(%s) && (%s)", x, strings.Join(in, " || "))
	if host.IsValid() {
		expr += fmt.Sprintf(" && ip(%s) != ip('%s')", x, host)
	}
	return "(" + expr + ")"
}
