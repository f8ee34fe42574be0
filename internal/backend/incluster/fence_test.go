//go:build integration

package incluster

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// portTemplate serves the API on port; it renders no pod.
type portTemplate struct{ port int32 }

func (p portTemplate) Settings(backend.Member) (Settings, error) {
	return Settings{APIPort: p.port}, nil
}
func (portTemplate) Pods(RenderInput) ([]corev1.Pod, error) { return nil, nil }

// TestFenceStopsEveryPodOfTheMember: against a real API server, Fence
// deletes each pod of the member (control plane and node, one found only
// by its name and owner) with a grace of one second, shortens a slower
// deletion already under way, leaves another member's pods and the
// member's other objects alone, and returns only once each control-plane
// pod is gone or refuses connections on the API port at its pod IP (a
// listener of the test stands for its API server), not waiting for node
// pods; while one still answers, it says so when its time is up. It is
// idempotent.
func TestFenceStopsEveryPodOfTheMember(t *testing.T) {
	env := testenv.Start(t)
	ns := env.NewNamespace(t)
	c := env.Client
	m := backend.Member{Namespace: ns, Name: "pool-ci-0", UID: "uid-fenced", Pool: "ci"}
	other := backend.Member{Namespace: ns, Name: "pool-ci-1", UID: "uid-other", Pool: "ci"}
	apiServer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = apiServer.Close() })
	go func() {
		for {
			conn, err := apiServer.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	port := int32(apiServer.Addr().(*net.TCPAddr).Port)
	b := &Backend{opts: Options{Type: kobev1.BackendKubernetes, Template: portTemplate{port}, Client: c, Namespace: ns}}

	// Pods bound to a node: the API server then keeps a deleted pod until
	// its kubelet confirms, as on a real host, so the grace can be read.
	pod := func(name string, meta metav1.ObjectMeta) *corev1.Pod {
		meta.Name, meta.Namespace = name, ns
		return &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{NodeName: "host-node-1",
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.example/none:1"}}}}
	}
	server := pod(podName(m, 0), objectMeta(kobev1.BackendKubernetes, m, podName(m, 0)))
	node := pod(baseName(m)+"-node-0", objectMeta(kobev1.BackendKubernetes, m, baseName(m)+"-node-0"))
	node.Labels[LabelComponent] = ComponentNode // as templates label node pods
	draining := pod(podName(m, 1), objectMeta(kobev1.BackendKubernetes, m, podName(m, 1)))
	otherPod := pod(podName(other, 0), objectMeta(kobev1.BackendKubernetes, other, podName(other, 0)))
	svc := renderService(kobev1.BackendKubernetes, m, 6443)
	for _, o := range []client.Object{server, node, draining, otherPod, svc} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	// Every pod has the listener's address, as the kubelet reports it.
	for _, p := range []*corev1.Pod{server, node, draining, otherPod} {
		p.Status.PodIP, p.Status.PodIPs = "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
		if err := c.Status().Update(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	// Its first pod, unlabelled but owned by the member, is found by name.
	unlabelled := server.DeepCopy()
	delete(unlabelled.Labels, LabelMemberUID)
	if err := c.Update(t.Context(), unlabelled); err != nil {
		t.Fatal(err)
	}
	// A deletion with the pod's whole grace is under way (a node drain).
	if err := c.Delete(t.Context(), draining, client.GracePeriodSeconds(30)); err != nil {
		t.Fatal(err)
	}

	// No kubelet stops them: the fence is not done when its time is up.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	err = b.Fence(ctx, m)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "still answers") {
		t.Fatalf("Fence with the API server still answering: %v, want an error saying so", err)
	}
	for _, p := range []*corev1.Pod{server, node, draining} {
		got := &corev1.Pod{}
		if err := c.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: p.Name}, got); err != nil {
			t.Fatal(err)
		}
		if got.DeletionTimestamp == nil || got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != fenceGrace {
			t.Errorf("pod %s: deletionTimestamp %v grace %v, want deleted with grace %d", p.Name, got.DeletionTimestamp, got.DeletionGracePeriodSeconds, fenceGrace)
		}
	}

	// A pod the kubelet removed is done with; one still answering is not.
	if err := c.Delete(t.Context(), draining, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	err = b.Fence(ctx, m)
	cancel()
	if err == nil || !strings.Contains(err.Error(), server.Name) || strings.Contains(err.Error(), draining.Name) {
		t.Fatalf("Fence with %s gone and %s answering: %v, want an error naming the second only", draining.Name, server.Name, err)
	}

	// The kubelet's SIGTERM: the API server closes its listener half a
	// second from now; the pod object stays until its containers are gone.
	closed := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = apiServer.Close()
		closed <- time.Now()
	}()
	for i := range 2 {
		if err := b.Fence(t.Context(), m); err != nil {
			t.Fatalf("Fence #%d: %v", i+1, err)
		}
		if i == 0 {
			select {
			case at := <-closed:
				t.Logf("Fence returned %v after the API server stopped answering", time.Since(at).Round(time.Millisecond))
			default:
				t.Fatal("Fence returned while the API server still answered")
			}
		}
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(node), &corev1.Pod{}); err != nil {
		t.Errorf("node pod: %v, want still there (deleted, not waited for)", err)
	}
	got := &corev1.Pod{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(otherPod), got); err != nil || got.DeletionTimestamp != nil {
		t.Errorf("another member's pod: %v, deleting %v; want untouched", err, got.DeletionTimestamp)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(svc), &corev1.Service{}); err != nil {
		t.Errorf("the member's Service: %v; Fence leaves it to Delete", err)
	}
	if err := b.Fence(t.Context(), backend.Member{Namespace: ns, Name: "pool-ci-9", UID: "uid-none"}); err != nil {
		t.Errorf("Fence of a member with no pods: %v, want nil", err)
	}
}
