package gates

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kunobi-ninja/kobe/internal/clusterdns"
)

func TestDNSProbeStep(t *testing.T) {
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := clusterdns.ProbePod(clusterdns.Image)
		p.UID = "pod-uid"
		p.CreationTimestamp = metav1.NewTime(t0)
		if mut != nil {
			mut(p)
		}
		return p
	}
	phase := func(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }
	cases := []struct {
		name        string
		probed      bool
		pod         *corev1.Pod
		action      probeAction
		msg         string
		logResolved bool
	}{
		{"probed and gone: done", true, nil, probeDone, "", false},
		{"probed, pod still there: delete", true, pod(phase(corev1.PodSucceeded)), probeDelete, "succeeded; deleting it", false},
		{"probed, pod being deleted: wait", true, pod(func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }), probeWait, "being deleted", false},
		{"not probed, no pod: create (a missing pod is not taken for a pass)", false, nil, probeCreate, "creating DNS probe pod kobe-dns-probe", false},
		{"running is not yet a pass: the names must resolve", false, pod(phase(corev1.PodRunning)), probeWait, "is resolving kubernetes.default", false},
		{"succeeded: record, then delete", false, pod(phase(corev1.PodSucceeded)), probeRecord, "resolved kubernetes.default", false},
		{"running, its log shows every name resolved: record, then delete", false, pod(phase(corev1.PodRunning)), probeRecord, "resolved kubernetes.default, kube-dns.kube-system.svc.cluster.local. (its log)", true},
		{"a log that says resolved does not undo a failure", false, pod(phase(corev1.PodFailed)), probeDelete, "failed", true},
		{"not started: a log cannot pass it", false, pod(phase(corev1.PodPending)), probeWait, "has not started", true},
		{"failed: the lookup error is told and the probe tried again", false, pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Error", Message: "kubernetes.default: lookup kubernetes.default on 198.19.192.10:53: i/o timeout"}}}}
		}), probeDelete, "failed (Error: kubernetes.default: lookup kubernetes.default on 198.19.192.10:53: i/o timeout)", false},
		{"image missing: the kubelet's reason", false, pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}}
		}), probeWait, "has not started: ErrImageNeverPull", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			action, msg := dnsProbeStep(tc.probed, tc.pod, tc.logResolved, t0)
			if action != tc.action || !strings.Contains(msg, tc.msg) {
				t.Errorf("dnsProbeStep = %d %q, want %d containing %q", action, msg, tc.action, tc.msg)
			}
		})
	}
}

// TestDNSHealthySteps walks the gate through a member's API (a fake
// clientset: the kubelet's and controllers' parts are played by the test):
// the objects are created at the tenth address of the Service range, the
// gate waits for the rollout, runs the probe, records it, and passes only
// once the probe pod is gone.
func TestDNSHealthySteps(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"},
		Spec:       corev1.ServiceSpec{ClusterIP: "198.19.130.1"},
	})
	step := func(wantPass bool, wantMsg string) {
		t.Helper()
		err := dnsHealthy(ctx, cs, "", t0)
		if (err == nil) != wantPass || err != nil && !strings.Contains(err.Error(), wantMsg) {
			t.Fatalf("dnsHealthy = %v, want pass %v containing %q", err, wantPass, wantMsg)
		}
	}
	step(false, "replicas updated")
	// As the API server does: a Service created again at an address the
	// first one holds is Invalid, not AlreadyExists.
	cs.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Service").GroupKind(), "kube-dns",
			field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), "198.19.130.10", "provided IP is already allocated")})
	})
	step(false, "replicas updated")
	svc, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != "198.19.130.10" {
		t.Fatalf("kube-dns Service %v, %v; want clusterIP 198.19.130.10", svc, err)
	}
	for _, get := range []func() error{
		func() error {
			_, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, "system:coredns", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	// The probe pod was created while CoreDNS rolls out.
	p, err := cs.CoreV1().Pods("kube-system").Get(ctx, clusterdns.ProbePodName, metav1.GetOptions{})
	if err != nil || p.Spec.DNSPolicy != corev1.DNSClusterFirst || p.Spec.Containers[0].Image != clusterdns.Image {
		t.Fatalf("probe pod %+v, %v", p, err)
	}
	step(false, "has not started")
	p.UID = "probe-1"
	p.Status.Phase = corev1.PodSucceeded
	if _, err := cs.CoreV1().Pods("kube-system").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Resolved, but CoreDNS has not rolled out: nothing is recorded.
	step(false, "replicas updated")
	if svc, _ := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); svc.Annotations[AnnotationDNSProbed] != "" {
		t.Fatalf("kube-dns records a probe before CoreDNS rolled out: %v", svc.Annotations)
	}
	// The Deployment controller rolls CoreDNS out.
	d, _ := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	d.Status = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
	if _, err := cs.AppsV1().Deployments("kube-system").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fake deletes at once: the record is what the pass rests on.
	step(false, "resolved")
	if svc, _ := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{}); svc.Annotations[AnnotationDNSProbed] != "probe-1" {
		t.Fatalf("kube-dns annotations %v, want the probe pod's UID recorded", svc.Annotations)
	}
	step(true, "")
	// Passed: a lease holder's later change to the Deployment is theirs;
	// the gate does not recreate or re-check it.
	if err := cs.AppsV1().Deployments("kube-system").Delete(ctx, "coredns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	step(true, "")
}

func TestDNSHealthyNeedsTheServiceRange(t *testing.T) {
	err := dnsHealthy(context.Background(), fake.NewClientset(), "", t0)
	if err == nil || !strings.Contains(err.Error(), "Service default/kubernetes") {
		t.Fatalf("dnsHealthy without the kubernetes Service = %v", err)
	}
}
