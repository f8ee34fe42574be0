//go:build root

package realnode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/gates"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
)

// TestProbeOnARealNode runs NodesReady's probe on the real-node host
// cluster: the probe pod, under Pod Security restricted, starts on a real
// kubelet with the preloaded pause image and is gone before the gate
// passes; a probe image the node lacks holds the gate with the kubelet's
// own reason.
func TestProbeOnARealNode(t *testing.T) {
	pauseTar := filepath.Join(testenv.RepoRoot(), "bin", "images", "pause.tar")
	if _, err := os.Stat(pauseTar); err != nil {
		t.Fatalf("%s is missing: run `make test-node` (it builds the pause image)", pauseTar)
	}
	c := hostcluster.Start(t, hostcluster.Options{PauseImage: gates.DefaultProbeImage, Images: []string{pauseTar}})
	ctx := t.Context()
	kubeconfig, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, gates.ProbeNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eval := func(image string) gates.Result {
		return gates.EvaluateMember(ctx, kubeconfig, kobev1.GatesOfTypes(kobev1.GateNodesReady), nil,
			gates.Options{Timeout: 10 * time.Second, Nodes: 1, ProbeImage: image})[0]
	}
	// waitFor evaluates as the instance controller does, every 500 ms,
	// until the gate passes or its message contains until.
	waitFor := func(t *testing.T, image, until string, within time.Duration) (gates.Result, []string) {
		t.Helper()
		var seen []string
		deadline := time.Now().Add(within)
		for {
			r := eval(image)
			if len(seen) == 0 || seen[len(seen)-1] != r.Message {
				seen = append(seen, r.Message)
			}
			if r.Passed || until != "" && strings.Contains(r.Message, until) || time.Now().After(deadline) {
				return r, seen
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	t.Run("a missing image holds the gate with the kubelet's reason", func(t *testing.T) {
		const missing = "kobe.local/absent:v1"
		r, seen := waitFor(t, missing, "ErrImageNeverPull", 30*time.Second)
		if r.Passed {
			t.Fatalf("passed with an image the node lacks: %v", seen)
		}
		if !strings.Contains(r.Message, "ErrImageNeverPull") || !strings.Contains(r.Message, missing) {
			t.Fatalf("message %q does not say the image is missing (seen: %v)", r.Message, seen)
		}
		t.Logf("gate message: %s", r.Message)
		// Clean up as a member would be: the test deletes the stuck pod.
		name := gates.ProbePodName(c.NodeName)
		if err := c.Client.CoreV1().Pods(gates.ProbeNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		waitGone(t, c, name)
	})

	t.Run("the probe starts, is deleted and gone, then the gate passes", func(t *testing.T) {
		start := time.Now()
		r, seen := waitFor(t, "", "", time.Minute)
		if !r.Passed {
			t.Fatalf("gate did not pass: %v", seen)
		}
		t.Logf("passed in %s; messages: %v", time.Since(start).Round(time.Millisecond), seen)
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Annotations[gates.AnnotationNodeProbed] == "" {
			t.Error("the node does not record the probe")
		}
		if _, err := c.Client.CoreV1().Pods(gates.ProbeNamespace).Get(ctx, gates.ProbePodName(c.NodeName), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("probe pod after the gate passed: %v", err)
		}
		if !strings.Contains(strings.Join(seen, "\n"), "started; deleting it") {
			t.Errorf("the pod was never seen started: %v", seen)
		}
	})
}

func waitGone(t *testing.T, c *hostcluster.Cluster, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "pod "+name+" gone", func() error {
		_, err := c.Client.CoreV1().Pods(gates.ProbeNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return apierrors.NewAlreadyExists(corev1.Resource("pods"), name)
		}
		return err
	})
}
