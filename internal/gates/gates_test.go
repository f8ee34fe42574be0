//go:build integration

package gates

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestGates runs the built-in gates against a real API server, standing in
// for a member, and an unreachable one.
func TestGates(t *testing.T) {
	env := testenv.Shared(t)
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	removeWhenDone(t, env.Client, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	all := []string{kobev1.GateAPIServerReachable, kobev1.GateInClusterToken, kobev1.GateDefaultServiceAccount, kobev1.GateNodesReady, "ExternalSignal"}
	eval := func(conds []metav1.Condition) map[string]Result {
		out := map[string]Result{}
		for _, r := range Evaluate(t.Context(), kubeconfig, kobev1.GatesOfTypes(all...), conds, 5*time.Second) {
			out[r.Name] = r
		}
		return out
	}
	expect := func(t *testing.T, got map[string]Result, want map[string]bool) {
		t.Helper()
		for g, pass := range want {
			if got[g].Passed != pass {
				t.Errorf("%s passed = %v, want %v (%s)", g, got[g].Passed, pass, got[g].Message)
			}
		}
	}

	t.Run("a bare API server passes only APIServerReachable", func(t *testing.T) {
		got := eval(nil)
		expect(t, got, map[string]bool{kobev1.GateAPIServerReachable: true, kobev1.GateInClusterToken: false, kobev1.GateDefaultServiceAccount: false, kobev1.GateNodesReady: false, "ExternalSignal": false})
		if !strings.Contains(got[kobev1.GateInClusterToken].Message, "default/default does not exist yet") {
			t.Errorf("InClusterToken message = %q", got[kobev1.GateInClusterToken].Message)
		}
		if !strings.Contains(got["ExternalSignal"].Message, "condition ExternalSignal is not set") {
			t.Errorf("ExternalSignal message = %q", got["ExternalSignal"].Message)
		}
	})

	t.Run("every gate passes once its signal exists", func(t *testing.T) {
		c := env.Client
		if err := c.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		if err := c.Create(t.Context(), node); err != nil {
			t.Fatal(err)
		}
		got := eval(nil)
		expect(t, got, map[string]bool{kobev1.GateInClusterToken: true, kobev1.GateDefaultServiceAccount: true, kobev1.GateNodesReady: false})
		if err := NodesReady(t.Context(), kubeconfig, 1, 5*time.Second); err == nil || !strings.Contains(err.Error(), "node n1 is not Ready") {
			t.Errorf("NodesReady with n1 not Ready = %v", err)
		}

		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		if err := c.Status().Update(t.Context(), node); err != nil {
			t.Fatal(err)
		}
		got = eval([]metav1.Condition{{Type: "ExternalSignal", Status: metav1.ConditionTrue}})
		expect(t, got, map[string]bool{kobev1.GateAPIServerReachable: true, kobev1.GateInClusterToken: true, kobev1.GateDefaultServiceAccount: true, kobev1.GateNodesReady: true, "ExternalSignal": true})
		if err := Probe(t.Context(), kubeconfig, 5*time.Second); err != nil {
			t.Errorf("Probe: %v", err)
		}
		if err := NodesReady(t.Context(), kubeconfig, 1, 5*time.Second); err != nil {
			t.Errorf("NodesReady(1) with n1 Ready: %v", err)
		}
		if err := NodesReady(t.Context(), kubeconfig, 2, 5*time.Second); err == nil || !strings.Contains(err.Error(), "1 of 2 nodes registered") {
			t.Errorf("NodesReady(2) with one node = %v", err)
		}
	})

	t.Run("an unreachable API server fails fast and the rest wait for it", func(t *testing.T) {
		dead := strings.Replace(string(kubeconfig), strings.TrimSuffix(env.Config.Host, "/"), "https://127.0.0.1:1", 1)
		if dead == string(kubeconfig) {
			t.Fatalf("host %s not found in the kubeconfig", env.Config.Host)
		}
		start := time.Now()
		rs := Evaluate(t.Context(), []byte(dead), kobev1.GatesOfTypes(all...), nil, 2*time.Second)
		if time.Since(start) > 5*time.Second {
			t.Errorf("evaluation took %s", time.Since(start))
		}
		for _, r := range rs[:4] {
			if r.Passed {
				t.Errorf("%s passed against a dead API server", r.Name)
			}
		}
		if !strings.Contains(rs[1].Message, "waiting for APIServerReachable") {
			t.Errorf("InClusterToken message = %q", rs[1].Message)
		}
		if Probe(t.Context(), []byte(dead), 2*time.Second) == nil {
			t.Error("Probe passed against a dead API server")
		}
		if AllPassed(rs) {
			t.Error("AllPassed")
		}
	})

	t.Run("a kubeconfig that does not parse fails every built-in gate", func(t *testing.T) {
		rs := Evaluate(t.Context(), []byte("{not yaml"), kobev1.GatesOfTypes(kobev1.GateAPIServerReachable, "X"), []metav1.Condition{{Type: "X", Status: metav1.ConditionTrue}}, time.Second)
		if rs[0].Passed || !rs[1].Passed {
			t.Errorf("results = %+v", rs)
		}
	})
}
