//go:build e2e && heavy

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestFrozenHandOuts: a local pool keeps one warm member running and
// freezes the other (warm.running 1); two leases asked one after the other
// both get a kubeconfig that works with kubectl by the time kobe lease
// returns: the second one's member was frozen, and was thawed and checked
// before it was handed out.
func TestFrozenHandOuts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("freezing members needs root (the cgroup freezer): run the heavy layer as root, as CI does")
	}
	p := newPool("frozen", 2)
	p.Spec.Warm = &kobev1.WarmSpec{Running: ptr.To[int32](1)}
	if err := s.env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// t.Context() is canceled by the time cleanups run.
		if err := s.env.Client.Delete(context.Background(), p); err != nil {
			t.Errorf("deleting pool %s: %v", p.Name, err)
		}
	})
	var frozen string
	testenv.Eventually(t, memberDeadline, "one member of pool frozen running, one frozen", func() error {
		var l kobev1.ClusterInstanceList
		if err := s.env.Client.List(t.Context(), &l, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelPool: p.Name}); err != nil {
			return err
		}
		var states []string
		frozen = ""
		for _, m := range l.Items {
			c := meta.FindStatusCondition(m.Status.Conditions, kobev1.ConditionFrozen)
			if m.Status.Phase == kobev1.InstanceReady && c != nil && c.Status == "True" {
				frozen = m.Name
			}
			states = append(states, fmt.Sprintf("%s=%s frozen=%v", m.Name, m.Status.Phase, c))
		}
		if len(l.Items) != 2 || frozen == "" {
			return fmt.Errorf("members: %s", strings.Join(states, "; "))
		}
		return nil
	})

	var clusters []string
	for i := range 2 {
		start := time.Now()
		l, kc := leaseCLI(t, p.Name, "--ttl", "5m")
		took := time.Since(start)
		if out, err := testenv.Kubectl(t, kc, "get", "ns", "kube-system"); err != nil {
			t.Errorf("lease %d (member %s): kubectl get ns with its kubeconfig: %v\n%s", i+1, l.ClusterName, err, out)
		}
		t.Logf("lease %d: member %s (frozen before: %v), kobe lease took %s", i+1, l.ClusterName, l.ClusterName == frozen, took.Round(time.Millisecond))
		clusters = append(clusters, l.ClusterName)
		defer func() {
			if _, errOut, err := kobe(t, "release", l.ID); err != nil {
				t.Errorf("kobe release %s: %v: %s", l.ID, err, errOut)
			}
		}()
	}
	if clusters[0] == frozen {
		t.Errorf("the first lease got the frozen member %s, not the running one", frozen)
	}
	if clusters[1] != frozen {
		t.Errorf("the second lease got %s, want the member that was frozen (%s)", clusters[1], frozen)
	}
}
