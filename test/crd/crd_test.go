//go:build integration

// Package crd_test checks kobe's CustomResourceDefinitions against a real
// kube-apiserver: the samples in config/samples apply unchanged, invalid
// objects are rejected with messages that say what is wrong, defaults are
// applied, and `kubectl get` shows the printer columns.
package crd_test

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestCRDs starts one control plane for the whole package (CI has two cores)
// and runs every check against it. testenv.Start ties the control plane to a
// testing.TB, so the checks are subtests of this test rather than top-level
// tests; run one with e.g. `go test ./test/crd -run 'TestCRDs/validation'`.
func TestCRDs(t *testing.T) {
	env := testenv.Start(t)
	t.Run("samples", func(t *testing.T) { testSamples(t, env) })
	t.Run("validation", func(t *testing.T) {
		t.Run("invalid objects are rejected", func(t *testing.T) { testInvalidObjectsRejected(t, env) })
		t.Run("valid edge cases are accepted", func(t *testing.T) { testValidEdgeCasesAccepted(t, env) })
	})
	t.Run("printer columns", func(t *testing.T) { testPrinterColumns(t, env) })
}

// newNamespace creates a namespace of its own for one group of checks.
func newNamespace(t *testing.T, env *testenv.Env, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// kubectl runs kubectl as the admin of env and returns its standard output
// (testenv.KubectlStdout), with a discovery cache of its own: discovery
// never comes from another test run.
func kubectl(t *testing.T, env *testenv.Env, args ...string) (string, error) {
	t.Helper()
	cache := filepath.Join(filepath.Dir(env.Kubeconfig), "kubectl-cache")
	return testenv.KubectlStdout(t, env.Kubeconfig, append([]string{"--cache-dir", cache}, args...)...)
}

// object builds a kobe object of kind named name in namespace ns whose spec
// is the YAML spec.
func object(t *testing.T, kind, ns, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("test bug: spec of %s/%s is not YAML: %v", kind, name, err)
	}
	if s == nil {
		s = map[string]any{}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": s}}
	u.SetGroupVersionKind(kobev1.GroupVersion.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}
