package netpolprobe

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

func TestJudge(t *testing.T) {
	ready := PodState{Created: true, Phase: corev1.PodRunning, Ready: true, IP: "10.0.0.5"}
	exited := func(code int32) PodState {
		phase := corev1.PodSucceeded
		if code != 0 {
			phase = corev1.PodFailed
		}
		return PodState{Created: true, Phase: phase, ExitCode: ptr.To(code)}
	}
	running := PodState{Created: true, Phase: corev1.PodRunning}
	pulling := PodState{Created: true, Phase: corev1.PodPending, Why: "ImagePullBackOff Back-off pulling image"}
	cases := []struct {
		name                     string
		listener, control, probe PodState
		at                       time.Duration
		want                     State
		wantDone                 bool
		wantIn                   string
	}{
		{"listener not up yet: wait", PodState{Created: true, Phase: corev1.PodPending}, PodState{}, PodState{}, time.Second, "", false, ""},
		{"probe refused, control connected: enforced", ready, exited(0), exited(1), 10 * time.Second, Enforced, true, "could not connect"},
		{"probe connected: not enforced", ready, exited(0), exited(0), 10 * time.Second, NotEnforced, true, "does not enforce"},
		{"probe connected before the control ended: not enforced", ready, running, exited(0), 10 * time.Second, NotEnforced, true, "does not enforce"},
		{"probe refused, control still running: wait", ready, running, exited(1), 10 * time.Second, "", false, ""},
		{"both refused: the probe proves nothing", ready, exited(1), exited(1), 10 * time.Second, Unknown, true, "control pod"},
		{"no etcdctl in the image", ready, PodState{Created: true, Phase: corev1.PodFailed, ExitCode: ptr.To[int32](128), Why: "StartError"}, exited(128), 10 * time.Second, Unknown, true, "exit code 128: StartError, not an answer of etcdctl: the image must have etcd and etcdctl"},
		{"probe crashed (OOM), not refused: nothing proven", ready, exited(0), exited(137), 10 * time.Second, Unknown, true, "exit code 137"},
		{"probe evicted without an exit code: nothing proven", ready, exited(0),
			PodState{Created: true, Phase: corev1.PodFailed, Why: "Evicted"}, 10 * time.Second, Unknown, true, "Evicted"},
		{"listener died: nothing proven", PodState{Created: true, Phase: corev1.PodFailed, ExitCode: ptr.To[int32](2)}, running, running, 10 * time.Second, Unknown, true, "listener pod ended"},
		{"image not pulled by the deadline", pulling, PodState{}, PodState{}, DefaultDeadline, Unknown, true, "ImagePullBackOff"},
		{"unschedulable clients by the deadline", ready, PodState{Created: true, Phase: corev1.PodPending, Why: "Unschedulable 0/1 nodes"}, running, DefaultDeadline + time.Second, Unknown, true, "control pod has not ended: Unschedulable"},
		{"image pulling before the deadline: wait", pulling, PodState{}, PodState{}, DefaultDeadline - time.Second, "", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := Observation{Namespace: "kobe-system", Image: "etcd:x", Started: t0, Deadline: DefaultDeadline,
				Listener: tc.listener, Control: tc.control, Probe: tc.probe}
			v, done := Judge(obs, t0.Add(tc.at))
			if done != tc.wantDone || v.State != tc.want {
				t.Fatalf("Judge = %+v, done %v; want %q, done %v", v, done, tc.want, tc.wantDone)
			}
			if done && (!strings.Contains(v.Message, tc.wantIn) || !strings.Contains(v.Message, "namespace kobe-system, image etcd:x")) {
				t.Errorf("message %q lacks %q or where", v.Message, tc.wantIn)
			}
			if done && !v.At.Equal(t0.Add(tc.at)) {
				t.Errorf("At = %v", v.At)
			}
		})
	}
}

func TestVerdictCondition(t *testing.T) {
	cases := []struct {
		v      Verdict
		status metav1.ConditionStatus
		reason string
	}{
		{Verdict{State: Enforced}, metav1.ConditionTrue, kobev1.ReasonNetworkPolicyEnforced},
		{Verdict{State: NotEnforced}, metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced},
		{Verdict{State: Unknown, Pending: true}, metav1.ConditionUnknown, kobev1.ReasonNetworkPolicyProbePending},
		{Verdict{State: Unknown}, metav1.ConditionUnknown, kobev1.ReasonNetworkPolicyUnproven},
	}
	for _, tc := range cases {
		c := tc.v.Condition()
		if c.Type != kobev1.ConditionNetworkPolicyEnforced || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%+v: condition %+v, want %s %s", tc.v, c, tc.status, tc.reason)
		}
	}
}
