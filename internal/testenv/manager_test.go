//go:build integration

package testenv_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestManagerCachesItsNamespaces starts a manager limited to one namespace
// on the real control plane and checks that its cache serves objects there
// and refuses other namespaces.
func TestManagerCachesItsNamespaces(t *testing.T) {
	env := testenv.Shared(t)
	ns, other := env.NewNamespace(t), env.NewNamespace(t)
	if ns == other {
		t.Fatalf("NewNamespace returned %q twice", ns)
	}
	mgr := env.NewManager(t, ns)
	testenv.StartManager(t, mgr)

	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cache to serve the config map", func() error {
		got := &corev1.ConfigMap{}
		if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
			return err
		}
		if got.Data["k"] != "v" {
			return fmt.Errorf("cached data %v", got.Data)
		}
		return nil
	})
	err := mgr.GetClient().Get(ctx, client.ObjectKey{Namespace: other, Name: "probe"}, &corev1.ConfigMap{})
	if err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("reading a namespace outside the cache: %v; want the cache to refuse it", err)
	}
}
