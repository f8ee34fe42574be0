//go:build integration

package chart

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestNamespaceGuard applies the chart's namespace guard (a
// ValidatingAdmissionPolicy and its binding) to a real API server: a
// ClusterPool or AccessPolicy created outside the release's namespace is
// refused with a message naming the namespace to use, while the release's
// own namespace and the other releases' (otherNamespaces) admit them.
func TestNamespaceGuard(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	installCRDs(t, env.Client)
	const elsewhere, otherRelease = "team-a", "kobe-two"
	for _, ns := range []string{testNamespace, elsewhere, otherRelease} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	r := mustRender(t, map[string]any{"namespaceGuard": map[string]any{"otherNamespaces": []any{otherRelease}}})
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if err := apply(ctx, env.Client, r.find(t, kind, 1)[0]); err != nil {
			t.Fatalf("applying %s: %v", kind, err)
		}
	}
	pool := func(ns, name string) client.Object {
		return &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To[int32](1), Backend: kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: &kobev1.SimBackendSpec{}}}}
	}
	policy := func(ns, name string) client.Object {
		return &kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: kobev1.AccessPolicySpec{
			Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "t"}}},
			Identity: "guard", Rules: []kobev1.AccessRule{{Pools: []string{"*"}}}}}
	}
	// The API server admits by the policy once its informer has it.
	testenv.Eventually(t, 30*time.Second, "a ClusterPool outside the release's namespace refused", func() error {
		err := env.Client.Create(ctx, pool(elsewhere, "probe"), client.DryRunAll)
		if err == nil {
			return errors.New("admitted")
		}
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "serves namespace "+testNamespace+" only") ||
			!strings.Contains(err.Error(), "a ClusterPool in namespace "+elsewhere) || !strings.Contains(err.Error(), "create it in namespace "+testNamespace) {
			return fmt.Errorf("refused, but not saying where to create it: %w", err)
		}
		t.Logf("refused: %v", err)
		return nil
	})
	if err := env.Client.Create(ctx, policy(elsewhere, "p")); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "AccessPolicy in namespace "+elsewhere) {
		t.Errorf("AccessPolicy outside the release's namespace: %v, want Forbidden naming the kind", err)
	}
	for _, ns := range []string{testNamespace, otherRelease} {
		for _, o := range []client.Object{pool(ns, "dev"), policy(ns, "p")} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Errorf("%T in namespace %s (a kobe release's): %v, want it admitted", o, ns, err)
			}
		}
	}
}
