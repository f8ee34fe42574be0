package gates

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func TestProbeStep(t *testing.T) {
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := ProbePod("n1", "")
		p.UID = "pod-uid"
		p.CreationTimestamp = metav1.NewTime(t0)
		if mut != nil {
			mut(p)
		}
		return p
	}
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0)) }
	waiting := func(reason, msg string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "probe", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
		}
	}
	cases := []struct {
		name   string
		ran    bool
		pod    *corev1.Pod
		now    time.Time
		action probeAction
		msg    string
	}{
		{"ran and gone: done", true, nil, t0, probeDone, ""},
		{"ran and still there: delete", true, pod(nil), t0, probeDelete, "ran; deleting it"},
		{"ran and being deleted: wait for the kubelet", true, pod(deleting), t0, probeWait, "waiting for the kubelet to remove it"},
		{"never ran and no pod: create (a missing pod is not taken for done)", false, nil, t0, probeCreate, "creating probe pod kobe-node-probe-n1"},
		{"never ran, an earlier pod is being deleted: wait", false, pod(deleting), t0, probeWait, "earlier probe pod"},
		{"a pod of that name on another node is replaced", false, pod(func(p *corev1.Pod) { p.Spec.NodeName = "n2" }), t0, probeDelete, `bound to node "n2", not "n1"`},
		{"Running: record, then delete", false, pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), t0, probeRecord, "started"},
		{"a container that started counts before the phase says so", false, pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Started: ptr.To(true)}}
		}), t0, probeRecord, "started"},
		{"image missing: the kubelet's reason and message", false, pod(waiting("ErrImageNeverPull", `Container image "kobe.local/pause:v1" is not present with pull policy of Never`)),
			t0, probeWait, `has not started: ErrImageNeverPull: Container image "kobe.local/pause:v1" is not present`},
		{"CreateContainerError is told", false, pod(waiting("CreateContainerError", "runc create failed")), t0, probeWait, "CreateContainerError: runc create failed"},
		{"a False pod condition is told when no container says anything", false, pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, Reason: "SandboxFailed"}}
		}), t0, probeWait, "PodReadyToStartContainers is False: SandboxFailed"},
		{"a kubelet that never reported says how long it waited", false, pod(nil), t0.Add(45*time.Second + 300*time.Millisecond), probeWait, "the kubelet has not reported it in 45s"},
		{"Pending without a reason says how long", false, pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), t0.Add(3 * time.Second), probeWait, "Pending for 3s"},
		{"a pod that ended without starting is tried again", false, pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason = "NodeAffinity"
		}), t0, probeDelete, "ended Failed without starting (NodeAffinity)"},
		{"a pod that ran to completion counts as started", false, pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodSucceeded
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(t0)}}}}
		}), t0, probeRecord, "started"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			action, msg := probeStep("n1", tc.ran, tc.pod, tc.now)
			if action != tc.action || !strings.Contains(msg, tc.msg) {
				t.Errorf("probeStep = %d %q, want %d containing %q", action, msg, tc.action, tc.msg)
			}
		})
	}
}

func TestProbePod(t *testing.T) {
	p := ProbePod("node-a", "")
	c := p.Spec.Containers[0]
	switch {
	case p.Name != "kobe-node-probe-node-a" || p.Namespace != "kube-system" || p.Spec.NodeName != "node-a":
		t.Errorf("identity: %s/%s on %q", p.Namespace, p.Name, p.Spec.NodeName)
	case c.Image != DefaultProbeImage || c.ImagePullPolicy != corev1.PullNever:
		t.Errorf("image %s %s", c.Image, c.ImagePullPolicy)
	case *p.Spec.AutomountServiceAccountToken || *p.Spec.TerminationGracePeriodSeconds != 0:
		t.Errorf("token %v, grace %d", *p.Spec.AutomountServiceAccountToken, *p.Spec.TerminationGracePeriodSeconds)
	}
	if got := ProbePod("n", "registry.example/pause:3").Spec.Containers[0].Image; got != "registry.example/pause:3" {
		t.Errorf("configured image = %s", got)
	}
	long := strings.Repeat("a", 250)
	if n := ProbePodName(long); len(n) != 253 || n == ProbePodName(strings.Repeat("a", 249)+"b") {
		t.Errorf("long node names: %d chars, distinct %v", len(n), n != ProbePodName(strings.Repeat("a", 249)+"b"))
	}
}

func TestIsReady(t *testing.T) {
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	cases := []struct {
		name   string
		conds  []corev1.NodeCondition
		taints []corev1.Taint
		want   bool
	}{
		{"Ready, no taints", ready, nil, true},
		{"Ready with a taint of the holder's", ready, []corev1.Taint{{Key: "example.com/gpu", Effect: corev1.TaintEffectNoSchedule}}, true},
		{"not Ready", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}, nil, false},
		{"no Ready condition", nil, nil, false},
		{"Ready again after a freeze, still unreachable", ready, []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}, false},
		{"Ready with the not-ready taint admission puts on every new Node", ready, []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}, true},
	}
	for _, c := range cases {
		n := &corev1.Node{Spec: corev1.NodeSpec{Taints: c.taints}, Status: corev1.NodeStatus{Conditions: c.conds}}
		if got := isReady(n); got != c.want {
			t.Errorf("%s: isReady = %v, want %v", c.name, got, c.want)
		}
	}
}
