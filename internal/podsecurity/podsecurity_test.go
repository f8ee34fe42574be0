package podsecurity

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/node"
)

// admissionConfig is the part of an AdmissionConfiguration the tests read.
type admissionConfig struct {
	Kind    string
	Plugins []struct {
		Name          string
		Configuration struct {
			Kind               string
			Defaults           map[string]string
			Exemptions         map[string][]string
			StaticManifestsDir string `json:"staticManifestsDir"`
		}
	}
}

// policyDocs splits the static manifests into policies and bindings by name.
func policyDocs(t *testing.T, data []byte) (map[string]admissionv1.ValidatingAdmissionPolicy, map[string]admissionv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	policies := map[string]admissionv1.ValidatingAdmissionPolicy{}
	bindings := map[string]admissionv1.ValidatingAdmissionPolicyBinding{}
	if data == nil {
		return policies, bindings
	}
	for doc := range strings.SplitSeq(string(data), "---\n") {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
			t.Fatal(err)
		}
		switch kind.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			policies[p.Name] = p
		case "ValidatingAdmissionPolicyBinding":
			var b admissionv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			bindings[b.Name] = b
		default:
			t.Fatalf("unexpected document:\n%s", doc)
		}
	}
	return policies, bindings
}

func TestRender(t *testing.T) {
	for _, level := range []kobev1.PodSecurityLevel{kobev1.PodSecurityPrivileged, kobev1.PodSecurityBaseline, kobev1.PodSecurityRestricted} {
		t.Run(string(level), func(t *testing.T) {
			config, policies, err := Render(kobev1.ClusterTemplate{PodSecurity: level}, "/etc/kobe/admission-policies")
			if err != nil {
				t.Fatal(err)
			}
			var cfg admissionConfig
			if err := yaml.Unmarshal(config, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.Kind != "AdmissionConfiguration" || len(cfg.Plugins) == 0 || cfg.Plugins[0].Name != "PodSecurity" {
				t.Fatalf("configuration:\n%s", config)
			}
			ps := cfg.Plugins[0].Configuration
			for _, mode := range []string{"enforce", "audit", "warn"} {
				if ps.Defaults[mode] != string(level) || ps.Defaults[mode+"-version"] != "latest" {
					t.Errorf("PodSecurity %s = %q at %q, want %s at latest", mode, ps.Defaults[mode], ps.Defaults[mode+"-version"], level)
				}
			}
			for _, k := range []string{"usernames", "runtimeClasses", "namespaces"} {
				if v, ok := ps.Exemptions[k]; !ok || len(v) != 0 {
					t.Errorf("exemptions %s = %v, want empty", k, v)
				}
			}
			if len(cfg.Plugins) != 2 || cfg.Plugins[1].Name != "ValidatingAdmissionPolicy" ||
				cfg.Plugins[1].Configuration.StaticManifestsDir != "/etc/kobe/admission-policies" {
				t.Fatalf("the static policies are not wired:\n%s", config)
			}
			vaps, bindings := policyDocs(t, policies)
			if level == kobev1.PodSecurityPrivileged {
				// Only the network volume policy (TestNetworkVolumePolicy).
				if len(vaps) != 1 || len(bindings) != 1 || vaps[NetworkVolumePolicy].Name == "" {
					t.Errorf("privileged keeps Pod Security policies:\n%s", policies)
				}
				return
			}
			if len(vaps) != 4 || len(bindings) != 4 {
				t.Fatalf("%d policies, %d bindings:\n%s", len(vaps), len(bindings), policies)
			}
			for name := range vaps {
				b := bindings[name]
				if !strings.HasSuffix(name, ".static.k8s.io") || b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
					t.Errorf("policy %s: binding %+v", name, b.Spec)
				}
				if fp := vaps[name].Spec.FailurePolicy; fp == nil || *fp != admissionv1.Fail {
					t.Errorf("policy %s fails open", name)
				}
			}
			ns := vaps[NamespacePolicy]
			assertRule(t, ns, []string{"namespaces", "namespaces/*"})
			enforce := ns.Spec.Validations[0].Expression
			if !strings.Contains(enforce, "'restricted'") || (level == kobev1.PodSecurityRestricted) == strings.Contains(enforce, "'baseline'") || strings.Contains(enforce, "'privileged'") {
				t.Errorf("%s: enforce labels allowed: %s", level, enforce)
			}
			pod := vaps[PodPolicy]
			assertRule(t, pod, []string{"pods", "pods/ephemeralcontainers"})
			if len(pod.Spec.Validations) != len(podChecks) {
				t.Errorf("%d validations for %d checks", len(pod.Spec.Validations), len(podChecks))
			}
			for _, v := range pod.Spec.Validations {
				if v.MessageExpression == "" || !strings.Contains(v.Message, "forbidden") && !strings.Contains(v.Message, "must") && !strings.Contains(v.Message, "may") {
					t.Errorf("validation %s: message %q, messageExpression %q", v.Expression, v.Message, v.MessageExpression)
				}
			}
			// The variables see every kind of container.
			if c := pod.Spec.Variables[0]; c.Name != "containers" || !strings.Contains(c.Expression, "initContainers") || !strings.Contains(c.Expression, "ephemeralContainers") {
				t.Errorf("containers variable %+v", c)
			}
			pv := vaps[VolumePolicy]
			assertRule(t, pv, []string{"persistentvolumes"})
			var exprs []string
			for _, v := range pv.Spec.Validations {
				if v.Reason == nil || *v.Reason != "Forbidden" || !strings.Contains(v.Message, "spec.") {
					t.Errorf("validation %s: reason %v, message %q", v.Expression, v.Reason, v.Message)
				}
				exprs = append(exprs, v.Expression)
			}
			all := strings.Join(exprs, "\n")
			for _, want := range []string{"!has(object.spec.local)", `matches("` + volumeDirPattern + `")`, "'DirectoryOrCreate'"} {
				if !strings.Contains(all, want) {
					t.Errorf("the volume policy lacks %s:\n%s", want, all)
				}
			}
		})
	}
}

func assertRule(t *testing.T, p admissionv1.ValidatingAdmissionPolicy, resources []string) {
	t.Helper()
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 {
		t.Fatalf("%s: rules %+v", p.Name, rules)
	}
	r := rules[0]
	if !slices.Equal(r.Resources, resources) || !slices.Equal(r.APIGroups, []string{""}) ||
		!slices.Equal(r.Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("%s: rule %+v, want %v on create and update", p.Name, r, resources)
	}
}

func TestRenderRefuses(t *testing.T) {
	if _, _, err := Render(kobev1.ClusterTemplate{PodSecurity: "lax"}, "/x"); err == nil || !strings.Contains(err.Error(), `spec.cluster.podSecurity "lax"`) {
		t.Errorf("unknown level: %v", err)
	}
	if _, _, err := Render(kobev1.ClusterTemplate{NetworkVolumes: "Maybe"}, "/x"); err == nil || !strings.Contains(err.Error(), `spec.cluster.networkVolumes "Maybe"`) {
		t.Errorf("unknown network volume policy: %v", err)
	}
	if _, _, err := Render(kobev1.ClusterTemplate{}, "policies"); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative manifests directory: %v", err)
	}
	if _, _, err := Render(kobev1.ClusterTemplate{PodSecurity: kobev1.PodSecurityPrivileged}, ""); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("a privileged member that refuses network volumes needs a directory: %v", err)
	}
	privileged := kobev1.ClusterTemplate{PodSecurity: kobev1.PodSecurityPrivileged, NetworkVolumes: kobev1.NetworkVolumesAllowed}
	if _, policies, err := Render(privileged, ""); err != nil || policies != nil {
		t.Errorf("a privileged member that allows network volumes needs no directory: %v", err)
	}
	if _, _, err := RenderShared(privileged, ""); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("a shared directory is always read: %v", err)
	}
}

// TestNetworkVolumePolicy checks where the network volume policy is
// rendered (at every level unless the pool allows network volumes) and what
// it matches; admissiontest runs it in a real API server, source by source.
func TestNetworkVolumePolicy(t *testing.T) {
	levels := []kobev1.PodSecurityLevel{"", kobev1.PodSecurityPrivileged, kobev1.PodSecurityBaseline, kobev1.PodSecurityRestricted}
	for _, nv := range []kobev1.NetworkVolumePolicy{"", kobev1.NetworkVolumesRefused, kobev1.NetworkVolumesAllowed} {
		for _, level := range levels {
			c := kobev1.ClusterTemplate{PodSecurity: level, NetworkVolumes: nv}
			config, policies, err := Render(c, "/p")
			if err != nil {
				t.Fatal(err)
			}
			vaps, bindings := policyDocs(t, policies)
			_, rendered := vaps[NetworkVolumePolicy]
			if want := nv != kobev1.NetworkVolumesAllowed; rendered != want || (bindings[NetworkVolumePolicy].Name != "") != want {
				t.Errorf("level %q, networkVolumes %q: network volume policy rendered %v, want %v", level, nv, rendered, want)
			}
			if rendered && !strings.Contains(string(config), "staticManifestsDir: /p") {
				t.Errorf("level %q, networkVolumes %q: the policy is not loaded:\n%s", level, nv, config)
			}
		}
	}

	_, policies, err := Render(kobev1.ClusterTemplate{}, "/p")
	if err != nil {
		t.Fatal(err)
	}
	vaps, _ := policyDocs(t, policies)
	p := vaps[NetworkVolumePolicy]
	assertRule(t, p, []string{"pods", "persistentvolumes"})
	if len(p.Spec.Validations) != 1 {
		t.Fatalf("validations %+v", p.Spec.Validations)
	}
	v := p.Spec.Validations[0]
	for _, msg := range []string{v.Message, v.MessageExpression} {
		if !strings.Contains(msg, "spec.cluster.networkVolumes is Refused (set it to Allowed to use them)") {
			t.Errorf("the refusal does not say what to do: %s", msg)
		}
	}
	if v.Reason == nil || *v.Reason != "Forbidden" || !strings.Contains(v.MessageExpression, "variables.offenders") {
		t.Errorf("validation %+v", v)
	}
	var exprs []string
	for _, vr := range p.Spec.Variables {
		exprs = append(exprs, vr.Expression)
	}
	all := strings.Join(exprs, "\n")
	for _, s := range networkVolumeSources {
		for _, x := range []string{"v", "object.spec"} {
			if !strings.Contains(all, "has("+x+"."+s+")") {
				t.Errorf("%s is not refused in %s", s, x)
			}
		}
	}
	for _, s := range admittedVolumeSources {
		if strings.Contains(all, "."+s+")") {
			t.Errorf("%s, which is admitted, is checked:\n%s", s, all)
		}
	}
}

// admittedVolumeSources are the volume sources NetworkVolumePolicy admits
// (networkVolumeSources says why).
var admittedVolumeSources = []string{"hostPath", "local", "emptyDir", "secret", "configMap", "downwardAPI", "projected",
	"persistentVolumeClaim", "ephemeral", "image", "csi"}

// TestEveryVolumeSourceIsClassified fails when Kubernetes adds a volume
// source that neither networkVolumeSources nor admittedVolumeSources names:
// someone must decide whether it mounts from the network.
func TestEveryVolumeSourceIsClassified(t *testing.T) {
	known := map[string]bool{}
	for _, s := range networkVolumeSources {
		if known[s] {
			t.Errorf("%s listed twice", s)
		}
		known[s] = true
	}
	for _, s := range admittedVolumeSources {
		if known[s] {
			t.Errorf("%s is both refused and admitted", s)
		}
		known[s] = true
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[corev1.VolumeSource](), reflect.TypeFor[corev1.PersistentVolumeSource]()} {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !known[name] {
				t.Errorf("%s.%s (%s) is neither refused nor admitted by the network volume policy", typ.Name(), f.Name, name)
			}
		}
	}
}

// TestVolumeDirPattern checks the hostPath rule with Go's regexp, the RE2
// that CEL's matches() runs.
func TestVolumeDirPattern(t *testing.T) {
	re := regexp.MustCompile(volumeDirPattern)
	root := node.StorageRoot
	for _, path := range []string{
		root + "/pvc-0123abcd", root + "/a", root + "/pvc-1.2", root + "/0",
	} {
		if !re.MatchString(path) {
			t.Errorf("%q refused", path)
		}
	}
	for _, path := range []string{
		"", "/", "/etc", "/var/lib", root, root + "/", root + "/.", root + "/..", root + "/./x",
		root + "/../x", root + "/../../etc", root + "/a/b", root + "/a/", root + "//a", "/" + root + "/a",
		root + "/A", root + "/-a", root + "/a-", root + "/.a", root + "/a.", root + "/a b", root + "/a\n",
		root + "x/a", "/var/lib/kobe-storagex/a", "x" + root + "/a",
	} {
		if re.MatchString(path) {
			t.Errorf("%q allowed", path)
		}
	}
}

func TestAPIServerFlags(t *testing.T) {
	for _, tc := range []struct {
		v     string
		flags string
		err   string
	}{
		{"1.37.2", "", ""},
		{"v1.38.0", "", ""},
		{"1.36.3", "--feature-gates=ManifestBasedAdmissionControlConfig=true", ""},
		{"1.35.10", "", "cannot load the static admission policies"},
		{"2.0.0", "", "want 1.x.y"},
		{"latest", "", "want 1.x.y"},
	} {
		flags, err := APIServerFlags(tc.v)
		if got := strings.Join(flags, " "); got != tc.flags || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("APIServerFlags(%q) = %q, %v; want %q, error containing %q", tc.v, got, err, tc.flags, tc.err)
		}
	}
}
