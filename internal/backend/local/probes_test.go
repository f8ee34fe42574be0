package local

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/gates"
)

// The head start creates exactly the pods the gates look for (same names,
// same nodes), and a second call, or a pod a gate made first, is no error.
func TestStartProbes(t *testing.T) {
	b := &Backend{opts: Options{PauseImage: "kobe.local/pause:v1"}}
	existing := gates.ProbePod(NodeName(1), "kobe.local/pause:v1")
	cs := fake.NewClientset(existing)
	st := &state{Nodes: 2}
	for range 2 {
		if err := b.startProbes(t.Context(), cs, st); err != nil {
			t.Fatal(err)
		}
	}
	pods, err := cs.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		clusterdns.ProbePodName:         "",
		gates.ProbePodName(NodeName(0)): NodeName(0),
		gates.ProbePodName(NodeName(1)): NodeName(1),
	}
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("kube-system/default, which the probe pods need, was not made: %v", err)
	}
	if len(pods.Items) != len(want) {
		t.Fatalf("%d pods, want %d: %v", len(pods.Items), len(want), names(pods.Items))
	}
	for _, p := range pods.Items {
		node, ok := want[p.Name]
		if !ok || p.Spec.NodeName != node {
			t.Errorf("pod %s/%s on node %q: not a probe pod the gates look for", p.Namespace, p.Name, p.Spec.NodeName)
		}
	}
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// kube-scheduler gets its kubeconfig, no leader election and the short
// backoff from its configuration file (it ignores the flags with --config).
func TestSchedulerConfig(t *testing.T) {
	p := paths{dir: t.TempDir()}
	if err := writeSchedulerConfig(p); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p.schedulerConfig())
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		APIVersion       string `json:"apiVersion"`
		Kind             string `json:"kind"`
		ClientConnection struct {
			Kubeconfig string `json:"kubeconfig"`
		} `json:"clientConnection"`
		LeaderElection struct {
			LeaderElect *bool `json:"leaderElect"`
		} `json:"leaderElection"`
		Initial int `json:"podInitialBackoffSeconds"`
		Max     int `json:"podMaxBackoffSeconds"`
	}
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if cfg.APIVersion != "kubescheduler.config.k8s.io/v1" || cfg.Kind != "KubeSchedulerConfiguration" || cfg.ClientConnection.Kubeconfig != p.kubeconfig(compScheduler) ||
		cfg.LeaderElection.LeaderElect == nil || *cfg.LeaderElection.LeaderElect || cfg.Initial != 1 || cfg.Max != 1 {
		t.Errorf("kube-scheduler configuration:\n%s", data)
	}
}
