//go:build integration

package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestServerDryRun sends every object of each render (defaults, every
// optional value, TLS from a Secret, TLS off, the self-signed certificate
// with more names, the local backend) to a real API server
// as a server-side apply with dryRun=All: the API server validates each one
// (schemas, CRDs, RBAC escalation) and stores nothing. cert-manager's and the
// Prometheus Operator's CRDs are minimal stand-ins from testdata/crds.
func TestServerDryRun(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	installCRDs(t, env.Client)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}); err != nil {
		t.Fatal(err)
	}
	renders := map[string]map[string]any{
		"defaults":             nil,
		"every optional value": allOn(t),
		"local backend":        valuesFile(t, "local.yaml"),
		"TLS from a Secret":    {"api": map[string]any{"tls": map[string]any{"enabled": true, "secretName": "my-cert"}}},
		"TLS off":              {"api": map[string]any{"tls": map[string]any{"enabled": false}}},
		"self-signed, names": {"fullnameOverride": "kb", "api": map[string]any{"connect": map[string]any{"url": "https://[fd00::7]:8443"},
			"tls": map[string]any{"selfSigned": map[string]any{"validityDays": 1, "extraDnsNames": []any{"kobe.example.org"}}}}},
	}
	for name, vals := range renders {
		t.Run(name, func(t *testing.T) {
			r := mustRender(t, vals)
			for _, o := range r.objs {
				if err := apply(ctx, env.Client, o, client.DryRunAll); err != nil {
					t.Errorf("server-side dry run of %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
		})
	}
}

// TestServiceAccountRights applies the default render's ServiceAccount and
// RBAC to a real API server, then asks it (SubjectAccessReview, as `kubectl
// auth can-i --as` does) what the ServiceAccount may do: every documented
// verb, and nothing of a list of rights the operator must not have.
func TestServiceAccountRights(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}); err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, nil)
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} {
		if err := apply(ctx, env.Client, r.find(t, kind, 1)[0]); err != nil {
			t.Fatalf("applying %s: %v", kind, err)
		}
	}
	user := "system:serviceaccount:" + testNamespace + ":kobe"
	canI := func(ns, verb, group, resource, name string) bool {
		t.Helper()
		sub, _, _ := strings.Cut(resource, "/")
		_, subresource, _ := strings.Cut(resource, "/")
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + testNamespace, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group,
				Resource: sub, Subresource: subresource, Name: name},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		return sar.Status.Allowed
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%-12s %-22s %-32s %-8s %s\n", "NAMESPACE", "GROUP", "RESOURCE", "VERB", "ALLOWED")
	for _, d := range documentedRules(t) {
		ns, name := testNamespace, ""
		if d.kind == "ClusterRole" {
			ns = ""
		}
		if d.names {
			name = testNamespace
		}
		for _, v := range d.verbs {
			ok := canI(ns, v, d.group, d.resource, name)
			fmt.Fprintf(&table, "%-12s %-22s %-32s %-8s %v\n", ns, d.group, d.resource, v, ok)
			if !ok {
				t.Errorf("%s may not %s %s/%s in %q, as documented", user, v, d.group, d.resource, ns)
			}
		}
	}
	refused := []struct{ ns, verb, group, resource, name string }{
		{"default", "get", "", "secrets", ""},
		{"default", "list", "kobe.kunobi.ninja", "clusterpools", ""},
		{"", "list", "kobe.kunobi.ninja", "clusterinstances", ""},
		{"", "list", "", "secrets", ""},
		{"", "get", "", "namespaces", "default"},
		{"", "list", "", "namespaces", ""},
		{testNamespace, "update", "kobe.kunobi.ninja", "bootstrapconfigs", ""},
		{testNamespace, "patch", "kobe.kunobi.ninja", "bootstrapconfigs/status", ""},
		{testNamespace, "update", "kobe.kunobi.ninja", "clusterleases", ""},
		{testNamespace, "patch", "kobe.kunobi.ninja", "clusterleases", ""},
		{testNamespace, "create", "kobe.kunobi.ninja", "clusterpools", ""},
		{testNamespace, "delete", "kobe.kunobi.ninja", "clusterpools", ""},
		{testNamespace, "update", "kobe.kunobi.ninja", "accesspolicies", ""},
		{testNamespace, "create", "kobe.kunobi.ninja", "accesspolicies", ""},
		{testNamespace, "patch", "", "secrets", ""},
		{testNamespace, "watch", "", "configmaps", ""},
		{testNamespace, "watch", "coordination.k8s.io", "leases", ""},
		{"default", "get", "", "pods", ""},
		{"default", "create", "", "pods", ""},
		{"default", "create", "", "pods/exec", ""},
		{"default", "delete", "", "services", ""},
		{"", "list", "", "pods", ""},
		{testNamespace, "watch", "", "pods", ""},
		{testNamespace, "update", "", "pods", ""},
		{testNamespace, "patch", "", "pods", ""},
		{testNamespace, "update", "", "services", ""},
		{testNamespace, "watch", "", "services", ""},
		{testNamespace, "update", "networking.k8s.io", "networkpolicies", ""},
		{testNamespace, "update", "policy", "poddisruptionbudgets", ""},
		{testNamespace, "create", "", "pods/eviction", ""},
		{testNamespace, "create", "apps", "deployments", ""},
		{testNamespace, "create", "", "serviceaccounts/token", "kobe"},
		{testNamespace, "create", "rbac.authorization.k8s.io", "roles", ""},
		{testNamespace, "bind", "rbac.authorization.k8s.io", "roles", ""},
		{testNamespace, "escalate", "rbac.authorization.k8s.io", "roles", ""},
		{testNamespace, "impersonate", "", "serviceaccounts", ""},
		// Nodes are listed for their ranges (hostCIDRs auto), never
		// watched, read one by one or changed.
		{"", "watch", "", "nodes", ""},
		{"", "get", "", "nodes", ""},
		{"", "patch", "", "nodes", ""},
		{"", "get", "", "nodes/proxy", ""},
		{"", "watch", "networking.k8s.io", "servicecidrs", ""},
		{"", "create", "apiextensions.k8s.io", "customresourcedefinitions", ""},
		{"", "create", "authorization.k8s.io", "subjectaccessreviews", ""},
		{"", "create", "certificates.k8s.io", "certificatesigningrequests", ""},
	}
	for _, x := range refused {
		ok := canI(x.ns, x.verb, x.group, x.resource, x.name)
		fmt.Fprintf(&table, "%-12s %-22s %-32s %-8s %v\n", x.ns, x.group, x.resource, x.verb, ok)
		if ok {
			t.Errorf("%s may %s %s/%s %q in %q: beyond what the operator needs", user, x.verb, x.group, x.resource, x.name, x.ns)
		}
	}
	t.Logf("what %s may do (kubectl auth can-i):\n%s", user, table.String())
}

// apply sends o as a server-side apply owned by the test; an unknown or
// duplicate field is an error, not a warning.
func apply(ctx context.Context, c client.Client, o *unstructured.Unstructured, opts ...client.PatchOption) error {
	opts = append(opts, client.ForceOwnership, client.FieldOwner("kobe-chart-test"), client.FieldValidation("Strict"))
	o = o.DeepCopy()
	return c.Patch(ctx, o, client.Apply, opts...) //nolint:staticcheck // unstructured objects: no apply configurations
}

// installCRDs creates the stand-in CRDs of testdata/crds and waits until
// they are served.
func installCRDs(t *testing.T, c client.Client) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "crds", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no CRDs in testdata/crds: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		// kobe's scheme has no apiextensions types: the CRD goes as it is.
		crd := &unstructured.Unstructured{Object: m}
		if err := c.Create(t.Context(), crd); err != nil {
			t.Fatalf("creating %s: %v", crd.GetName(), err)
		}
		testenv.Eventually(t, 30*time.Second, crd.GetName()+" established", func() error {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(crd.GroupVersionKind())
			if err := c.Get(t.Context(), client.ObjectKey{Name: crd.GetName()}, got); err != nil {
				return err
			}
			var typed apiextv1.CustomResourceDefinition
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &typed); err != nil {
				return err
			}
			for _, cond := range typed.Status.Conditions {
				if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("not established: %v", typed.Status.Conditions)
		})
	}
}
