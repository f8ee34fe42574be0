//go:build integration

package gates

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestMain stops the control plane the tests share (testenv.Shared).
func TestMain(m *testing.M) { testenv.Main(m) }

// removeWhenDone deletes objs (those that exist) when the test ends: each
// test stands the shared API server in for a whole member, nodes and
// kube-system included, so each leaves it as it found it.
func removeWhenDone(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background() // t.Context() is done by now
		for _, o := range objs {
			if err := c.Delete(ctx, o, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				t.Errorf("removing %T %s: %v", o, o.GetName(), err)
			}
		}
	})
}
