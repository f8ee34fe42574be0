//go:build integration

package gates

import (
	"context"
	"fmt"
	"os"
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

// TestNodeProbe runs NodesReady for a member with two real nodes against a
// real API server standing in for the member. The test plays the kubelet:
// it writes the probe pods' status and removes them once deleted. kube-system
// enforces Pod Security restricted, so the probe pod must pass it.
func TestNodeProbe(t *testing.T) {
	env := testenv.Shared(t)
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, ctx := env.Client, t.Context()
	// What the test may make outside a namespace of its own.
	var made []client.Object
	for _, n := range []string{"n1", "n2", "kwok"} {
		made = append(made, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ProbePodName(n), Namespace: ProbeNamespace}})
	}
	removeWhenDone(t, c, append(made, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "sandbox", Namespace: ProbeNamespace}})...)
	ks := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: ProbeNamespace}, ks); err != nil {
		t.Fatal(err)
	}
	labels := ks.Labels
	ks.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	if err := c.Update(ctx, ks); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background() // t.Context() is done by now
		err := c.Get(ctx, client.ObjectKeyFromObject(ks), ks)
		if err == nil {
			ks.Labels = labels
			err = c.Update(ctx, ks)
		}
		if err != nil {
			t.Errorf("restoring the labels of %s: %v", ProbeNamespace, err)
		}
	})
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: ProbeNamespace},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "kobe.local/pause:test"}}}}
	if err := c.Create(ctx, bad); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("Pod Security restricted does not hold in %s: creating a plain pod gave %v", ProbeNamespace, err)
	}
	// The member's controller manager creates it; a bare API server has none.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ProbeNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	const image = "kobe.local/pause:test"
	now := time.Now()
	eval := func(t *testing.T) Result {
		t.Helper()
		rs := EvaluateMember(ctx, kubeconfig, kobev1.GatesOfTypes(kobev1.GateNodesReady), nil, Options{Timeout: 5 * time.Second, Nodes: 2, ProbeImage: image, Now: now})
		return rs[0]
	}
	expect := func(t *testing.T, pass bool, contains ...string) {
		t.Helper()
		r := eval(t)
		if r.Passed != pass {
			t.Fatalf("passed = %v, want %v: %s", r.Passed, pass, r.Message)
		}
		for _, s := range contains {
			if !strings.Contains(r.Message, s) {
				t.Fatalf("message %q lacks %q", r.Message, s)
			}
		}
	}
	newNode := func(t *testing.T, name string, ready bool) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		if ready {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
			if err := c.Status().Update(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	getPod := func(t *testing.T, node string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ProbeNamespace, Name: ProbePodName(node)}, p)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	setStatus := func(t *testing.T, node string, st corev1.PodStatus) *corev1.Pod {
		t.Helper()
		p := getPod(t, node)
		if p == nil {
			t.Fatalf("no probe pod on %s", node)
		}
		p.Status = st
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// kubeletRemoves finishes a graceful deletion the way the kubelet does.
	kubeletRemoves := func(t *testing.T, node string) {
		t.Helper()
		p := getPod(t, node)
		if p == nil || p.DeletionTimestamp == nil {
			t.Fatalf("probe pod on %s is not being deleted: %+v", node, p)
		}
		if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	annotation := func(t *testing.T, node string) string {
		t.Helper()
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			t.Fatal(err)
		}
		return n.Annotations[AnnotationNodeProbed]
	}
	running := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "probe", Image: image, Ready: true, Started: ptr.To(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}

	t.Run("too few Ready nodes: no probe yet, the message counts them", func(t *testing.T) {
		expect(t, false, "0 of 2 nodes Ready")
		newNode(t, "n1", true)
		newNode(t, "n2", false)
		expect(t, false, "1 of 2 nodes Ready; not Ready: n2")
		if getPod(t, "n1") != nil {
			t.Error("a probe pod was created before enough nodes were Ready")
		}
	})

	t.Run("each Ready node gets a pinned probe pod that passes Pod Security restricted", func(t *testing.T) {
		n2 := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: "n2"}, n2); err != nil {
			t.Fatal(err)
		}
		n2.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		if err := c.Status().Update(ctx, n2); err != nil {
			t.Fatal(err)
		}
		expect(t, false, "node n1: creating probe pod kobe-node-probe-n1", "node n2: creating probe pod kobe-node-probe-n2")
		for _, n := range []string{"n1", "n2"} {
			p := getPod(t, n)
			if p == nil {
				t.Fatalf("no probe pod for %s", n)
			}
			ct := p.Spec.Containers[0]
			if p.Spec.NodeName != n || ct.Image != image || ct.ImagePullPolicy != corev1.PullNever || *p.Spec.AutomountServiceAccountToken ||
				len(p.Spec.Volumes) != 0 || *p.Spec.TerminationGracePeriodSeconds != 0 {
				t.Errorf("probe pod of %s: %+v", n, p.Spec)
			}
		}
		// Evaluating again creates nothing new and still waits.
		uid := getPod(t, "n1").UID
		expect(t, false, "kobe-node-probe-n1 has not started")
		if getPod(t, "n1").UID != uid {
			t.Error("the probe pod was replaced while it waited")
		}
	})

	t.Run("a pod that cannot start says why", func(t *testing.T) {
		setStatus(t, "n1", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "probe", Image: image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull",
				Message: `Container image "kobe.local/pause:test" is not present with pull policy of Never`}}}}})
		p2 := setStatus(t, "n2", corev1.PodStatus{Phase: corev1.PodPending})
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "sandbox", Namespace: ProbeNamespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ProbeNamespace, Name: p2.Name, UID: p2.UID},
			Type:           corev1.EventTypeWarning, Reason: "FailedCreatePodSandBox",
			Message:       `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to create containerd task: can't get final child's PID from pipe`,
			LastTimestamp: metav1.Now(), Source: corev1.EventSource{Component: "kubelet", Host: "n2"},
		}
		if err := c.Create(ctx, ev); err != nil {
			t.Fatal(err)
		}
		expect(t, false, `node n1: probe pod kobe-node-probe-n1 has not started: ErrImageNeverPull: Container image "kobe.local/pause:test" is not present`,
			"node n2: probe pod kobe-node-probe-n2 has not started: Pending for", "last warning: FailedCreatePodSandBox: Failed to create pod sandbox")
	})

	t.Run("a started pod is recorded on the node, deleted, and the gate passes only once it is gone", func(t *testing.T) {
		p1 := setStatus(t, "n1", running)
		expect(t, false, "node n1: probe pod kobe-node-probe-n1 started; deleting it", "node n2")
		if got := annotation(t, "n1"); got != string(p1.UID) {
			t.Fatalf("node n1 annotation = %q, want the pod's UID %s", got, p1.UID)
		}
		if p := getPod(t, "n1"); p == nil || p.DeletionTimestamp == nil {
			t.Fatalf("probe pod of n1 is not being deleted gracefully: %+v", p)
		}
		expect(t, false, "node n1: probe pod kobe-node-probe-n1 ran and is being deleted; waiting for the kubelet")
		kubeletRemoves(t, "n1")
		r := eval(t)
		if r.Passed || strings.Contains(r.Message, "node n1") {
			t.Fatalf("after n1's probe: %+v", r)
		}
		if getPod(t, "n1") != nil {
			t.Fatal("a missing pod on a probed node was re-created")
		}
		setStatus(t, "n2", running)
		expect(t, false, "node n2: probe pod kobe-node-probe-n2 started")
		kubeletRemoves(t, "n2")
		expect(t, true)
		expect(t, true) // idempotent: nothing is probed again
		for _, n := range []string{"n1", "n2"} {
			if getPod(t, n) != nil {
				t.Errorf("probe pod of %s exists after the gate passed", n)
			}
		}
	})

	t.Run("a node that registers again is probed again", func(t *testing.T) {
		if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "n2 gone", func() error {
			if err := c.Get(ctx, client.ObjectKey{Name: "n2"}, &corev1.Node{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("n2: %w", err)
			}
			return nil
		})
		newNode(t, "n2", true)
		expect(t, false, "node n2: creating probe pod")
		if getPod(t, "n2") == nil {
			t.Fatal("no new probe pod on the re-registered node")
		}
	})

	t.Run("a pod that ended without starting is replaced", func(t *testing.T) {
		old := setStatus(t, "n2", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "UnexpectedAdmissionError", Message: "Pod was rejected"})
		expect(t, false, "ended Failed without starting (UnexpectedAdmissionError: Pod was rejected)")
		// A Failed pod is removed at once (no kubelet confirmation needed).
		if p := getPod(t, "n2"); p != nil && p.UID == old.UID && p.DeletionTimestamp == nil {
			t.Fatal("the failed probe pod was not deleted")
		}
		expect(t, false, "node n2: creating probe pod")
		if p := getPod(t, "n2"); p == nil || p.UID == old.UID {
			t.Fatalf("no replacement probe pod: %+v", p)
		}
		if annotation(t, "n2") != "" {
			t.Error("a pod that never started was recorded as run")
		}
	})

	t.Run("without real nodes NodesReady keeps its old meaning and starts no pod", func(t *testing.T) {
		newNode(t, "kwok", true)
		rs := Evaluate(ctx, kubeconfig, kobev1.GatesOfTypes(kobev1.GateNodesReady), nil, 5*time.Second)
		if !rs[0].Passed {
			t.Fatalf("NodesReady without nodes requested: %+v", rs[0])
		}
		if getPod(t, "kwok") != nil {
			t.Error("a probe pod was started for a member without real nodes")
		}
	})
}
