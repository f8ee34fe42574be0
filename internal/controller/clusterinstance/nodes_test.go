//go:build integration

package clusterinstance

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/gates"
	"github.com/kunobi-ninja/kobe/internal/nodestorage"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestMemberWithNodesWaitsForTheProbe: a member whose pool asks for a real
// node, and lists no readiness gate, is held Creating by NodesReady until a
// probe pod started on its node and is gone, then by DNSHealthy until the
// cluster DNS rolled out and its probe pod succeeded and is gone. The test API server stands in
// for the member (the fake backend hands out its kubeconfig) and the test
// plays the member's kubelet.
func TestMemberWithNodesWaitsForTheProbe(t *testing.T) {
	h := startHarness(t)
	c, ctx := h.c, t.Context()
	// The member's controller manager creates it; the test API server has none.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: gates.ProbeNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := h.namespace(t)
	_, m := h.poolAndMember(t, ns, func(p *kobev1.ClusterPool) {
		p.Spec.Backend.Local = &kobev1.LocalBackendSpec{Nodes: ptr.To[int32](1)}
	})
	nodesReady := func() (*kobev1.ClusterInstance, *metav1.Condition) {
		got, ok := h.get(t, m)
		if !ok {
			t.Fatal("member gone")
		}
		return got, meta.FindStatusCondition(got.Status.Conditions, kobev1.GateNodesReady)
	}
	testenv.Eventually(t, 15*time.Second, "NodesReady pending without a node", func() error {
		got, c := nodesReady()
		return holds(c != nil && c.Status == metav1.ConditionFalse && c.Message == "0 of 1 nodes Ready" && got.Status.Phase == kobev1.InstanceCreating,
			fmt.Sprintf("phase %s, NodesReady %+v", got.Status.Phase, c))
	})

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "member-node-0"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Nodes are the whole API server's, which the package's tests share.
		if err := c.Delete(context.Background(), node); client.IgnoreNotFound(err) != nil {
			t.Errorf("removing node %s: %v", node.Name, err)
		}
	})
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: gates.ProbeNamespace, Name: gates.ProbePodName(node.Name)}
	pod := &corev1.Pod{}
	testenv.Eventually(t, 15*time.Second, "a probe pod on the Ready node", func() error { return c.Get(ctx, key, pod) })
	if ct := pod.Spec.Containers[0]; pod.Spec.NodeName != node.Name || ct.Image != gates.DefaultProbeImage {
		t.Fatalf("probe pod on %q with image %s", pod.Spec.NodeName, ct.Image)
	}
	// Not Ready while the pod has not started; the condition says what it waits for.
	testenv.Eventually(t, 15*time.Second, "NodesReady names the waiting probe pod", func() error {
		got, c := nodesReady()
		return holds(c != nil && strings.Contains(c.Message, "probe pod "+key.Name+" has not started") && got.Status.Phase == kobev1.InstanceCreating,
			fmt.Sprintf("phase %s, NodesReady %+v", got.Status.Phase, c))
	})

	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "probe",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the probe pod is being deleted", func() error {
		if err := c.Get(ctx, key, pod); err != nil {
			return err
		}
		return holds(pod.DeletionTimestamp != nil, "not deleted yet")
	})
	// Several evaluations: still not Ready while the pod is there.
	testenv.Consistently(t, time.Second, "the member not Ready while its probe pod exists", func() error {
		got, c := nodesReady()
		return holds(got.Status.Phase == kobev1.InstanceCreating && c != nil && c.Status == metav1.ConditionFalse,
			fmt.Sprintf("member %s with NodesReady %+v while its probe pod still exists", got.Status.Phase, c))
	})
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil { // the kubelet's part
		t.Fatal(err)
	}

	// DNSHealthy next: CoreDNS is created, and the member is not Ready
	// until it rolled out and the DNS probe pod succeeded and is gone.
	dep := &appsv1.Deployment{}
	depKey := client.ObjectKey{Namespace: clusterdns.Namespace, Name: clusterdns.Name}
	testenv.Eventually(t, 15*time.Second, "the CoreDNS Deployment", func() error { return c.Get(ctx, depKey, dep) })
	t.Cleanup(func() {
		for _, o := range append(clusterdns.Objects(netip.Addr{}, ""), nodestorage.Objects()...) {
			if err := c.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
				t.Errorf("removing %T %s: %v", o, o.GetName(), err)
			}
		}
	})
	dnsHealthy := func() *metav1.Condition {
		got, _ := h.get(t, m)
		return meta.FindStatusCondition(got.Status.Conditions, kobev1.GateDNSHealthy)
	}
	testenv.Eventually(t, 15*time.Second, "DNSHealthy waits for the rollout", func() error {
		c := dnsHealthy()
		return holds(c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "the Deployment kube-system/coredns"), fmt.Sprintf("DNSHealthy %+v", c))
	})
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := c.Status().Update(ctx, dep); err != nil { // the Deployment controller's part
		t.Fatal(err)
	}
	dnsKey := client.ObjectKey{Namespace: clusterdns.Namespace, Name: clusterdns.ProbePodName}
	dnsPod := &corev1.Pod{}
	testenv.Eventually(t, 15*time.Second, "the DNS probe pod", func() error { return c.Get(ctx, dnsKey, dnsPod) })
	testenv.Consistently(t, time.Second, "the member not Ready while the DNS probe has not run", func() error {
		got, _ := h.get(t, m)
		return holds(got.Status.Phase == kobev1.InstanceCreating, "member "+string(got.Status.Phase))
	})
	dnsPod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded}
	if err := c.Status().Update(ctx, dnsPod); err != nil {
		t.Fatal(err)
	}
	// Never bound to a node here (no scheduler), the pod goes at once.
	testenv.Eventually(t, 15*time.Second, "the DNS probe pod deleted", func() error {
		err := c.Get(ctx, dnsKey, dnsPod)
		return holds(apierrors.IsNotFound(err), fmt.Sprintf("still there: %v", err))
	})
	if svc := (&corev1.Service{}); c.Get(ctx, client.ObjectKey{Namespace: clusterdns.Namespace, Name: clusterdns.ServiceName}, svc) != nil ||
		svc.Annotations[gates.AnnotationDNSProbed] != string(dnsPod.UID) {
		t.Errorf("kube-dns does not record the probe pod %s: %v", dnsPod.UID, svc.Annotations)
	}
	got := h.waitPhase(t, m, kobev1.InstanceReady, 15*time.Second)
	if c := meta.FindStatusCondition(got.Status.Conditions, kobev1.GateNodesReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready member's NodesReady = %+v", c)
	}
	if err := c.Get(ctx, key, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("probe pod after hand-out readiness: %v", err)
	}
}
