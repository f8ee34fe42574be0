package gates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The node probe of NodesReady for members with real nodes: on each Ready
// node a pod kobe-node-probe-<node> must start, and is then deleted before
// the member is handed out. Gates are evaluated again and again, by any
// replica, after restarts; every step below is decided from what the
// member's API server holds, nothing from memory:
//
//  1. node not annotated, no probe pod: create the pod, pinned to the node.
//  2. node not annotated, pod started (Running, or a container started):
//     annotate the node with the pod's UID (the record that the probe ran),
//     then delete the pod.
//  3. node annotated, pod still there: delete it and wait until it is gone.
//  4. node annotated, no pod: done.
//
// The annotation is written before the pod is deleted, so a pod that is
// missing is never taken for one that ran; a node that registers again
// (deleted and re-created) loses the annotation and is probed again.
const (
	// DefaultProbeImage is the pause image the nodes of local and in-cluster
	// members preload (bin/images/pause.tar).
	DefaultProbeImage = "kobe.local/pause:v1"
	// ProbeNamespace holds the probe pods: kube-system, where a member's
	// own infrastructure lives, so that they never show among the lease
	// holder's pods in default (they are gone before hand-out anyway).
	ProbeNamespace = metav1.NamespaceSystem
	// ProbePodPrefix starts every probe pod's name; the node's name follows.
	ProbePodPrefix = "kobe-node-probe-"
	// AnnotationNodeProbed on a member's Node records the UID of the probe
	// pod that started there.
	AnnotationNodeProbed = "kobe.kunobi.ninja/node-probe"
	// LabelNodeProbe marks probe pods.
	LabelNodeProbe = "kobe.kunobi.ninja/node-probe"
)

// probeDeleteGrace is the grace period the probe pod is deleted with: not
// 0, which would remove the object at once whatever the node does, so that
// "gone" means the kubelet stopped the container and removed the pod.
const probeDeleteGrace = 1

// ProbePodName is the name of the probe pod of node.
func ProbePodName(node string) string {
	name := ProbePodPrefix + node
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(node))
	return name[:253-17] + "-" + hex.EncodeToString(sum[:8])
}

// ProbePod is the probe pod of node: the pause image, pinned to the node
// (no scheduler involved), tolerating every taint, without a ServiceAccount
// token, and passing Pod Security restricted, the strictest level a pool
// may set.
func ProbePod(node, image string) *corev1.Pod {
	if image == "" {
		image = DefaultProbeImage
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: ProbePodName(node), Namespace: ProbeNamespace,
			Labels: map[string]string{LabelNodeProbe: "true"},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			RestartPolicy:                 corev1.RestartPolicyNever,
			// The pause container resolves nothing, and a member may have
			// no cluster DNS: ClusterFirst would only add a warning.
			DNSPolicy:   corev1.DNSDefault,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65535),
				RunAsGroup:     ptr.To[int64](65535),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "probe",
				Image: image,
				// Never: the image is preloaded on every node, and nothing
				// may be pulled from outside the machine; a node without it
				// says ErrImageNeverPull.
				ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsNonRoot:             ptr.To(true),
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		},
	}
}

// probeAction is what one evaluation does for one node.
type probeAction int

const (
	probeDone probeAction = iota
	probeCreate
	probeWait
	// probeRecord annotates the node, then deletes the pod.
	probeRecord
	probeDelete
)

// probeStep decides the next step on one Ready node from whether the node
// records a probe that ran and the probe pod (nil when there is none). The
// message says what the gate waits for.
func probeStep(node string, ran bool, pod *corev1.Pod, now time.Time) (probeAction, string) {
	switch {
	case ran && pod == nil:
		return probeDone, ""
	case ran && pod.DeletionTimestamp != nil:
		return probeWait, fmt.Sprintf("probe pod %s ran and is being deleted; waiting for the kubelet to remove it", pod.Name)
	case ran:
		return probeDelete, fmt.Sprintf("probe pod %s ran; deleting it", pod.Name)
	case pod == nil:
		return probeCreate, fmt.Sprintf("creating probe pod %s", ProbePodName(node))
	case pod.DeletionTimestamp != nil:
		return probeWait, fmt.Sprintf("an earlier probe pod %s is being deleted", pod.Name)
	case pod.Spec.NodeName != node:
		return probeDelete, fmt.Sprintf("pod %s is bound to node %q, not %q; deleting it", pod.Name, pod.Spec.NodeName, node)
	case started(pod):
		return probeRecord, fmt.Sprintf("probe pod %s started; deleting it", pod.Name)
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return probeDelete, fmt.Sprintf("probe pod %s ended %s without starting (%s); trying again", pod.Name, pod.Status.Phase, notStarted(pod, now))
	}
	return probeWait, fmt.Sprintf("probe pod %s has not started: %s", pod.Name, notStarted(pod, now))
}

// started reports whether the pod's container started.
func started(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodRunning {
		return true
	}
	return slices.ContainsFunc(pod.Status.ContainerStatuses, func(c corev1.ContainerStatus) bool {
		return c.State.Running != nil || c.State.Terminated != nil && !c.State.Terminated.StartedAt.IsZero() || ptr.Deref(c.Started, false)
	})
}

// notStarted says why the pod has not started, from what the kubelet
// reported: a container's waiting or terminated reason and message, else a
// pod condition that is False, else how long it has waited for the kubelet.
func notStarted(pod *corev1.Pod, now time.Time) string {
	for _, c := range pod.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			return joinReason(c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			return joinReason(c.State.Terminated.Reason, c.State.Terminated.Message)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status == corev1.ConditionFalse && (c.Reason != "" || c.Message != "") {
			return fmt.Sprintf("%s is False: %s", c.Type, joinReason(c.Reason, c.Message))
		}
	}
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		return joinReason(pod.Status.Reason, pod.Status.Message)
	}
	waited := now.Sub(pod.CreationTimestamp.Time).Truncate(time.Second)
	if pod.Status.Phase == "" {
		return fmt.Sprintf("the kubelet has not reported it in %s", waited)
	}
	return fmt.Sprintf("%s for %s", pod.Status.Phase, waited)
}

func joinReason(reason, msg string) string {
	switch {
	case msg == "":
		return reason
	case reason == "":
		return msg
	}
	return reason + ": " + msg
}

// probeNodes is NodesReady for a member with want real nodes: at least want
// nodes are Ready, and the probe has run on every Ready node and its pod is
// gone.
func probeNodes(ctx context.Context, cs kubernetes.Interface, want int32, image string, now time.Time) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	var ready []corev1.Node
	var notReady []string
	for _, n := range nodes.Items {
		if isReady(&n) {
			ready = append(ready, n)
		} else {
			notReady = append(notReady, n.Name)
		}
	}
	if int32(len(ready)) < want {
		msg := fmt.Sprintf("%d of %d nodes Ready", len(ready), want)
		if len(notReady) > 0 {
			msg += "; not Ready: " + strings.Join(notReady, ", ")
		}
		return errors.New(msg)
	}
	var pending []string
	for i := range ready {
		msg, err := probeNode(ctx, cs, &ready[i], image, now)
		if err != nil {
			pending = append(pending, fmt.Sprintf("node %s: %v", ready[i].Name, err))
		} else if msg != "" {
			pending = append(pending, fmt.Sprintf("node %s: %s", ready[i].Name, msg))
		}
	}
	if len(pending) > 0 {
		return errors.New(strings.Join(pending, "; "))
	}
	return nil
}

// isReady: the node is Ready and not tainted unreachable. A node Ready
// again after a freeze keeps the unreachable NoExecute taint its node
// controller set until the controller's next pass: a hand-out in that
// window would get a node that schedules nothing and evicts what it runs.
// (The not-ready taint is not waited for: admission puts it on every new
// Node, and only a node controller lifts it.)
func isReady(n *corev1.Node) bool {
	ready := slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
	return ready && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeUnreachable
	})
}

// probeNode takes one step of the probe on a Ready node; it returns what
// the gate still waits for, "" once the probe ran there and its pod is gone.
func probeNode(ctx context.Context, cs kubernetes.Interface, node *corev1.Node, image string, now time.Time) (string, error) {
	pods := cs.CoreV1().Pods(ProbeNamespace)
	name := ProbePodName(node.Name)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		pod = nil
	case err != nil:
		return "", fmt.Errorf("getting probe pod %s: %w", name, err)
	}
	action, msg := probeStep(node.Name, node.Annotations[AnnotationNodeProbed] != "", pod, now)
	switch action {
	case probeDone:
		return "", nil
	case probeCreate:
		if _, err := pods.Create(ctx, ProbePod(node.Name, image), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating probe pod %s: %w", name, err)
		}
	case probeRecord:
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationNodeProbed, pod.UID)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return "", fmt.Errorf("recording on node %s that probe pod %s ran: %w", node.Name, name, err)
		}
		fallthrough
	case probeDelete:
		err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](probeDeleteGrace),
			Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return "", fmt.Errorf("deleting probe pod %s: %w", name, err)
		}
	case probeWait:
		if pod != nil && !started(pod) && pod.DeletionTimestamp == nil && !kubeletSaysWhy(pod) {
			if w := lastWarning(ctx, cs, pod); w != "" {
				msg += "; last warning: " + w
			}
		}
	}
	return msg, nil
}

// kubeletSaysWhy reports whether a container of pod has a reason of its
// own for not running (ErrImageNeverPull, CreateContainerError...), beyond
// the ContainerCreating every container starts with.
func kubeletSaysWhy(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Status.ContainerStatuses, func(c corev1.ContainerStatus) bool {
		return c.State.Terminated != nil || c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "ContainerCreating"
	})
}

// lastWarning is the newest Warning event about pod (sandbox and mount
// errors are told only there), "" when there is none or it cannot be read.
func lastWarning(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) string {
	sel := fields.Set{"involvedObject.name": pod.Name, "involvedObject.uid": string(pod.UID), "type": corev1.EventTypeWarning}
	evs, err := cs.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil || len(evs.Items) == 0 {
		return ""
	}
	last := slices.MaxFunc(evs.Items, func(a, b corev1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
	return joinReason(last.Reason, strings.TrimSpace(last.Message))
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
