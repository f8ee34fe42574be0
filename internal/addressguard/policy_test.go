package addressguard

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestPolicyRefusesIncompleteRanges(t *testing.T) {
	if _, err := Policy(Ranges{}); err == nil || !strings.Contains(err.Error(), "port") {
		t.Fatalf("Policy without an API server port: %v, want an error naming the port", err)
	}
	if _, err := Policy(Ranges{APIServer: netip.MustParseAddrPort("1.2.3.4:6443"), Pods: []netip.Prefix{{}}}); err == nil {
		t.Fatal("Policy with an invalid prefix: no error")
	}
}

func TestPolicyRendersRangesIntoEveryAddressRule(t *testing.T) {
	data, err := Policy(Ranges{
		Pods:      []netip.Prefix{netip.MustParsePrefix("198.18.128.0/22")},
		Nodes:     []netip.Prefix{netip.MustParsePrefix("198.19.192.0/24")},
		Host:      netip.MustParseAddr("198.19.192.1"),
		APIServer: netip.MustParseAddrPort("198.19.192.1:6443"),
	})
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want a policy and a binding, got %d documents", len(docs))
	}
	var policy struct {
		Metadata struct{ Name string }
		Spec     struct {
			FailurePolicy string `json:"failurePolicy"`
			Validations   []struct{ Expression, Message string }
		}
	}
	if err := yaml.Unmarshal([]byte(docs[0]), &policy); err != nil {
		t.Fatal(err)
	}
	if policy.Metadata.Name != PolicyName || policy.Spec.FailurePolicy != "Fail" {
		t.Fatalf("policy %q failurePolicy %q", policy.Metadata.Name, policy.Spec.FailurePolicy)
	}
	for _, v := range policy.Spec.Validations[:4] {
		if !strings.Contains(v.Expression, "198.") {
			t.Errorf("address rule names no member range: %s", v.Expression)
		}
	}
	if !strings.Contains(policy.Spec.Validations[0].Expression, "ip('198.19.192.1')") {
		t.Errorf("the pod rule does not exclude the host's own address: %s", policy.Spec.Validations[0].Expression)
	}
}
