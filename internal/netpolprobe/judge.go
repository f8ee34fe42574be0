package netpolprobe

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// State is what a probe proved.
type State string

const (
	// Enforced: the client under a deny-all policy could not connect while
	// the control client could.
	Enforced State = "Enforced"
	// NotEnforced: the client under a deny-all policy connected.
	NotEnforced State = "NotEnforced"
	// Unknown: nothing was proven (no probe finished, or its pods did not
	// run, or the control client failed too).
	Unknown State = "Unknown"
)

// refusedExit is etcdctl's exit code when an endpoint is unhealthy: the
// probe client's expected end under an enforced policy. Any other failure
// (OOM, a missing binary) proves nothing.
const refusedExit = 1

// Verdict is the latest answer for one etcd image.
type Verdict struct {
	State State
	// Pending: no probe of the image has finished yet (State Unknown).
	Pending bool
	// Message says what was seen, for the pool's condition.
	Message string
	// At is when the probe ended; zero while Pending.
	At time.Time
}

// Condition is the pool's NetworkPolicyEnforced condition for v.
func (v Verdict) Condition() metav1.Condition {
	c := metav1.Condition{Type: kobev1.ConditionNetworkPolicyEnforced, Message: v.Message}
	switch {
	case v.State == Enforced:
		c.Status, c.Reason = metav1.ConditionTrue, kobev1.ReasonNetworkPolicyEnforced
	case v.State == NotEnforced:
		c.Status, c.Reason = metav1.ConditionFalse, kobev1.ReasonNetworkPolicyNotEnforced
	case v.Pending:
		c.Status, c.Reason = metav1.ConditionUnknown, kobev1.ReasonNetworkPolicyProbePending
	default:
		c.Status, c.Reason = metav1.ConditionUnknown, kobev1.ReasonNetworkPolicyUnproven
	}
	return c
}

// PodState is what one probe pod shows.
type PodState struct {
	// Created: the pod was created (a client is created only once the
	// listener is Ready).
	Created bool
	Phase   corev1.PodPhase
	Ready   bool
	IP      string
	// ExitCode is the container's, once it terminated.
	ExitCode *int32
	// Why is what holds the pod back or ended it: a waiting container's
	// reason and message, an unschedulable pod's, a failed pod's.
	Why string
}

func (p PodState) ended() bool { return p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed }

// Observation is one look at a probe run.
type Observation struct {
	Namespace string
	Image     string
	// Started is when the run began; past Started+Deadline it proves nothing.
	Started  time.Time
	Deadline time.Duration
	// Listener accepts connections with no policy on it; Control connects
	// to it with no policy, Probe under a deny-all (ingress and egress)
	// policy.
	Listener, Control, Probe PodState
}

// Judge decides a run from obs at now; done is false while it must wait.
// Enforced needs both halves: the probe refused (etcdctl's own failure,
// not any exit) and the control connected, or a probe that could not have
// connected anyway would pass for enforcement.
func Judge(obs Observation, now time.Time) (v Verdict, done bool) {
	where := fmt.Sprintf("namespace %s, image %s", obs.Namespace, obs.Image)
	end := func(s State, format string, args ...any) (Verdict, bool) {
		return Verdict{State: s, At: now, Message: fmt.Sprintf(format, args...) + " (" + where + ")"}, true
	}
	exit := func(p PodState) (int32, bool) {
		if p.ExitCode == nil {
			return 0, false
		}
		return *p.ExitCode, true
	}
	pc, probeEnded := exit(obs.Probe)
	cc, controlEnded := exit(obs.Control)
	switch {
	case probeEnded && pc == 0:
		return end(NotEnforced, "a pod under a deny-all NetworkPolicy connected to a listener pod: the host cluster's CNI does not enforce NetworkPolicy, so members are not isolated")
	case controlEnded && cc == refusedExit:
		return end(Unknown, "the control pod, under no NetworkPolicy, could not connect to the listener either: the namespace's own policies or the network block it, so the probe proves nothing")
	case controlEnded && cc != 0:
		return end(Unknown, "the control pod ended with exit code %d%s, not an answer of etcdctl: the image must have etcd and etcdctl in %s", cc, why(obs.Control), etcdBinDir)
	case probeEnded && pc != refusedExit:
		return end(Unknown, "the probe pod ended with exit code %d, not a refused connection (%d)%s", pc, refusedExit, why(obs.Probe))
	case probeEnded && controlEnded:
		return end(Enforced, "a pod under a deny-all NetworkPolicy could not connect to a listener pod that a pod under no policy reached")
	}
	for _, p := range []struct {
		name string
		s    PodState
	}{{"listener", obs.Listener}, {"control", obs.Control}, {"probe", obs.Probe}} {
		if p.s.ended() && p.s.ExitCode == nil || p.name == "listener" && p.s.ended() {
			return end(Unknown, "the %s pod ended (%s) before the probe did%s", p.name, p.s.Phase, why(p.s))
		}
	}
	if now.Sub(obs.Started) >= obs.Deadline {
		return end(Unknown, "no answer within %s: %s", obs.Deadline, waiting(obs))
	}
	return Verdict{}, false
}

// waiting says which pod the run waits for, and why.
func waiting(obs Observation) string {
	switch {
	case !obs.Listener.Ready:
		return "the listener pod is not Ready" + why(obs.Listener)
	case obs.Control.ExitCode == nil:
		return "the control pod has not ended" + why(obs.Control)
	}
	return "the probe pod has not ended" + why(obs.Probe)
}

func why(p PodState) string {
	if p.Why == "" {
		return ""
	}
	return ": " + p.Why
}
