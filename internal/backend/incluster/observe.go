package incluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/backend"
)

// crashRestarts is the restart count from which a container in
// CrashLoopBackOff fails the member.
const crashRestarts = 3

// fatalWaiting are container waiting reasons no wait will cure.
var fatalWaiting = map[string]bool{
	"ErrImageNeverPull": true, "InvalidImageName": true, "ImagePullBackOff": true,
	"CreateContainerConfigError": true, "CreateContainerError": true,
}

// Observe implements backend.Observe: Absent when nothing of the member
// exists; Failed when a pod that was created is gone, is being deleted,
// ended (Failed or Succeeded), cannot pull its image, crash-loops, or stays
// unschedulable past UnschedulableTimeout, or when the Service or Secret
// vanished or no longer match each other, or the egress Service of a member
// with pods vanished; Ready, with Access, when every
// pod is Ready; Provisioning otherwise. It only reads.
func (b *Backend) Observe(ctx context.Context, m backend.Member) (backend.Observation, error) {
	set, err := b.opts.Template.Settings(m)
	if err != nil {
		return backend.Observation{State: backend.StateFailed, Message: err.Error()}, nil
	}
	svc := &corev1.Service{}
	svcErr := b.get(ctx, m, serviceName(m), svc)
	if svcErr != nil && !apierrors.IsNotFound(svcErr) {
		return backend.Observation{}, fmt.Errorf("reading Service of member %s: %w", m.Name, svcErr)
	}
	sec := &corev1.Secret{}
	secErr := b.get(ctx, m, secretName(m), sec)
	if secErr != nil && !apierrors.IsNotFound(secErr) {
		return backend.Observation{}, fmt.Errorf("reading PKI Secret of member %s: %w", m.Name, secErr)
	}
	var pods corev1.PodList
	if err := b.opts.Client.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels(selectorFor(b.opts.Type, m))); err != nil {
		return backend.Observation{}, fmt.Errorf("listing pods of member %s: %w", m.Name, err)
	}
	svcGone, secGone := apierrors.IsNotFound(svcErr), apierrors.IsNotFound(secErr)
	if svcGone && secGone && len(pods.Items) == 0 {
		return backend.Observation{State: backend.StateAbsent, Message: "no host object of the member exists"}, nil
	}
	if svcGone {
		return failed("Service %s is gone", serviceName(m)), nil
	}
	created, _ := strconv.Atoi(svc.Annotations[AnnotationPodsCreated])
	if secGone {
		if created > 0 {
			return failed("PKI Secret %s is gone", secretName(m)), nil
		}
		return provisioning("creating the member's PKI"), nil
	}
	if ip := sec.Annotations[AnnotationClusterIP]; ip != svc.Spec.ClusterIP {
		return failed("Service %s has ClusterIP %q, but the PKI was made for %q", svc.Name, svc.Spec.ClusterIP, ip), nil
	}
	if set.PKI.Egress && created > 0 {
		// Made once, before the pods, whose host alias holds its address.
		err := b.get(ctx, m, EgressServiceName(m), &corev1.Service{})
		if apierrors.IsNotFound(err) {
			return failed("Service %s (the API server's way to its pods) is gone", EgressServiceName(m)), nil
		}
		if err != nil {
			return backend.Observation{}, fmt.Errorf("reading the egress Service of member %s: %w", m.Name, err)
		}
	}
	if obs, done := b.judgePods(m, pods.Items, created, set.Nodes); done {
		return obs, nil
	}
	acc, err := accessFrom(sec, svc.Spec.ClusterIP, set.APIPort)
	if err != nil {
		return failed("%v", err), nil
	}
	if len(set.Nodes) > 0 {
		if why := nodesNotReady(ctx, acc.AdminKubeconfig, set.Nodes); why != "" {
			return provisioning(why), nil
		}
	}
	return backend.Observation{State: backend.StateReady, Access: acc}, nil
}

// nodeCheckTimeout bounds Observe's look at the member's nodes.
const nodeCheckTimeout = 5 * time.Second

// nodesNotReady asks the member's API server (with its admin kubeconfig)
// whether every node pod has registered its node and the node is Ready,
// and says what is missing ("" when all are).
func nodesNotReady(ctx context.Context, kubeconfig []byte, names []string) string {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return fmt.Sprintf("reading the admin kubeconfig: %v", err)
	}
	cfg.Timeout = nodeCheckTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Sprintf("a client of the member: %v", err)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("listing the member's nodes: %v", err)
	}
	ready := map[string]bool{}
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready[n.Name] = true
			}
		}
	}
	var waiting []string
	for _, n := range names {
		if !ready[n] {
			waiting = append(waiting, n)
		}
	}
	if len(waiting) > 0 {
		return fmt.Sprintf("node %s not registered Ready in the member", strings.Join(waiting, ", "))
	}
	return ""
}

// judgePods returns the observation the pods force (done), or done=false
// when every pod that should exist does and is Ready.
func (b *Backend) judgePods(m backend.Member, pods []corev1.Pod, created int, nodes []string) (backend.Observation, bool) {
	if created == 0 {
		if len(pods) == 0 {
			return provisioning("creating the member's host objects"), true
		}
	} else {
		have := map[string]bool{}
		for i := range pods {
			have[pods[i].Name] = true
		}
		for i := 0; i < created-len(nodes); i++ {
			if !have[podName(m, i)] {
				return failed("control-plane pod %s is gone (its etcd with it); the member is reaped, never restarted empty", podName(m, i)), true
			}
		}
		for _, n := range nodes {
			if !have[n] {
				return failed("node pod %s is gone (the member's containers on it with it); the member is reaped, never repaired", n), true
			}
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	var waiting []string
	for i := range pods {
		p := &pods[i]
		if why := b.podFailure(p); why != "" {
			return failed("pod %s: %s", p.Name, why), true
		}
		if why, stuck := b.unschedulable(p); why != "" {
			if stuck {
				return failed("pod %s is unschedulable for more than %s: %s", p.Name, b.opts.UnschedulableTimeout, why), true
			}
			waiting = append(waiting, fmt.Sprintf("pod %s is unschedulable: %s", p.Name, why))
			continue
		}
		if !podReady(p) {
			waiting = append(waiting, fmt.Sprintf("pod %s is %s, not Ready", p.Name, p.Status.Phase))
		}
	}
	if created == 0 {
		waiting = append(waiting, "creating the member's pods")
	}
	if len(waiting) > 0 {
		return provisioning(strings.Join(waiting, "; ")), true
	}
	return backend.Observation{}, false
}

// podFailure says why a pod can no longer serve the member, or "".
func (b *Backend) podFailure(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "being deleted"
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		msg := "ended " + string(p.Status.Phase)
		if p.Status.Reason != "" {
			msg += " (" + p.Status.Reason + ": " + p.Status.Message + ")"
		}
		return msg
	}
	for _, cs := range p.Status.ContainerStatuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		if fatalWaiting[w.Reason] || (w.Reason == "CrashLoopBackOff" && cs.RestartCount >= crashRestarts) {
			return fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	return ""
}

// unschedulable says why the scheduler cannot place p ("" when it can or
// did), and whether it has been so for longer than UnschedulableTimeout.
func (b *Backend) unschedulable(p *corev1.Pod) (string, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			since := c.LastTransitionTime.Time
			if since.IsZero() {
				since = p.CreationTimestamp.Time
			}
			return c.Message, b.opts.Now().Sub(since) > b.opts.UnschedulableTimeout
		}
	}
	return "", false
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func failed(format string, a ...any) backend.Observation {
	return backend.Observation{State: backend.StateFailed, Message: fmt.Sprintf(format, a...)}
}

func provisioning(msg string) backend.Observation {
	return backend.Observation{State: backend.StateProvisioning, Message: msg}
}
