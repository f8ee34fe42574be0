//go:build root

package localnodes

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/kobesuite"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestFrozenMemberWithANode: a member with a node that waited frozen
// (warm.running 1) is handed out with its node Ready and scheduling: the
// thaw's check waits until the member's node controller has seen its
// kubelet again (a node it saw silent for the whole freeze is marked
// NotReady at the thaw, for about 10 s).
//
// The thaw takes about as long as building a new member, so the first
// lease's replacement could win the race for the second lease: a readiness
// gate only this test passes (a condition it sets on the pool's first two
// members) keeps every later member from becoming Ready.
func TestFrozenMemberWithANode(t *testing.T) {
	const heldByTest = "HeldByTest"
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: "nodes-frozen", Namespace: kobesuite.Namespace},
		Spec: kobev1.ClusterPoolSpec{
			Size:           ptr.To[int32](2),
			TTL:            &metav1.Duration{Duration: 30 * time.Minute},
			Backend:        kobev1.BackendSpec{Type: kobev1.BackendLocal, Local: &kobev1.LocalBackendSpec{PreloadImages: []string{testappArchive}}},
			Warm:           &kobev1.WarmSpec{Running: ptr.To[int32](1)},
			ReadinessGates: []kobev1.ReadinessGate{{Type: heldByTest}},
		},
	}
	if err := s.Env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// No refill after the test: the pool goes, its members with it.
		ctx := context.Background()
		if err := s.Env.Client.Delete(ctx, p); err != nil {
			t.Errorf("deleting pool %s: %v", p.Name, err)
		}
		testenv.Eventually(t, memberDeadline, "the pool's members gone", func() error {
			var l kobev1.ClusterInstanceList
			if err := s.Env.Client.List(ctx, &l, client.InNamespace(p.Namespace), client.MatchingLabels{kobev1.LabelPool: p.Name}); err != nil {
				return err
			}
			if len(l.Items) > 0 {
				return fmt.Errorf("%d members left", len(l.Items))
			}
			return nil
		})
	}()
	var frozen string
	passed := map[string]bool{} // the members whose gate this test passed
	testenv.Eventually(t, memberDeadline, "one member running and one frozen", func() error {
		var l kobev1.ClusterInstanceList
		if err := s.Env.Client.List(t.Context(), &l, client.InNamespace(p.Namespace), client.MatchingLabels{kobev1.LabelPool: p.Name}); err != nil {
			return err
		}
		frozen = ""
		var states []string
		for i := range l.Items {
			m := &l.Items[i]
			if !meta.IsStatusConditionTrue(m.Status.Conditions, heldByTest) && (passed[m.Name] || len(passed) < 2) {
				meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: heldByTest, Status: metav1.ConditionTrue, Reason: "PassedByTest", Message: "one of the pool's first two members"})
				if err := s.Env.Client.Status().Update(t.Context(), m); err != nil {
					return fmt.Errorf("passing %s's gate: %w", m.Name, err)
				}
				passed[m.Name] = true
			}
		}
		for _, m := range l.Items {
			if m.Status.Phase == kobev1.InstanceReady && meta.IsStatusConditionTrue(m.Status.Conditions, kobev1.ConditionFrozen) {
				frozen = m.Name
			}
			states = append(states, m.Name+"="+string(m.Status.Phase))
		}
		if frozen == "" || len(l.Items) != 2 {
			return fmt.Errorf("members %v", states)
		}
		return nil
	})
	// Frozen long enough that its node controller would call the node
	// lost (the node monitor grace period, 50 s).
	time.Sleep(55 * time.Second)

	var ids []string
	defer func() {
		for _, id := range ids {
			if out, errOut, err := s.Kobe(t, time.Minute, "release", id); err != nil {
				t.Errorf("kobe release %s: %v\n%s%s", id, err, out, errOut)
			}
		}
	}()
	// Both leases back to back: the second one waits for the frozen
	// member's thaw and check (no member runs once the first is bound).
	var kubeconfigs []string
	for i := range 2 {
		kc := filepath.Join(t.TempDir(), "kubeconfig")
		start := time.Now()
		out, errOut, err := s.Kobe(t, time.Minute, "lease", p.Name, "--ttl", "10m", "--kubeconfig", kc, "-o", "json")
		if err != nil {
			t.Fatalf("kobe lease %s: %v\n%s%s", p.Name, err, out, errOut)
		}
		took := time.Since(start)
		var l wire.Lease
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, l.ID)
		kubeconfigs = append(kubeconfigs, kc)
		t.Logf("lease %d: member %s (frozen before: %v) in %s", i+1, l.ClusterName, l.ClusterName == frozen, took.Round(time.Millisecond))
		if i == 1 && l.ClusterName != frozen {
			t.Fatalf("the second lease got %s, not the frozen member %s", l.ClusterName, frozen)
		}
	}
	for i, kc := range kubeconfigs {
		nodes := testenv.MustKubectl(t, kc, "get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type==\"Ready\")].status} taints={.spec.taints}{\"\\n\"}{end}")
		if nodes != "node-0 True taints=" {
			t.Errorf("lease %d: the member's node is not one Ready, untainted node at hand-out:\n%s", i+1, nodes)
		}
		testenv.MustKubectl(t, kc, "run", "ping", "--image", testappImage, "--restart", "Never", "--image-pull-policy", "Never", "--", "dial", "kubernetes.default.svc:443")
		testenv.MustKubectl(t, kc, "wait", "--for", "jsonpath={.status.phase}=Succeeded", "pod/ping", "--timeout", "60s")
	}
}
