//go:build integration

package incluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestFenceStopsEveryPodOfTheMember: against a real API server, Fence
// deletes each pod of the member (control plane and node, one found only
// by its name and owner) with a grace of one second, shortens a slower
// deletion already under way, leaves another member's pods and the
// member's other objects alone, and is idempotent.
func TestFenceStopsEveryPodOfTheMember(t *testing.T) {
	env := testenv.Start(t)
	ns := env.NewNamespace(t)
	c := env.Client
	m := backend.Member{Namespace: ns, Name: "pool-ci-0", UID: "uid-fenced", Pool: "ci"}
	other := backend.Member{Namespace: ns, Name: "pool-ci-1", UID: "uid-other", Pool: "ci"}
	b := &Backend{opts: Options{Type: kobev1.BackendKubernetes, Client: c, Namespace: ns}}

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
	draining := pod(podName(m, 1), objectMeta(kobev1.BackendKubernetes, m, podName(m, 1)))
	otherPod := pod(podName(other, 0), objectMeta(kobev1.BackendKubernetes, other, podName(other, 0)))
	svc := renderService(kobev1.BackendKubernetes, m, 6443)
	for _, o := range []client.Object{server, node, draining, otherPod, svc} {
		if err := c.Create(t.Context(), o); err != nil {
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

	for i := range 2 {
		if err := b.Fence(t.Context(), m); err != nil {
			t.Fatalf("Fence #%d: %v", i+1, err)
		}
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
