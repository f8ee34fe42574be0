package gates

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/memberaddons"
)

// DNSHealthy for a member with real nodes: the cluster DNS objects exist
// (created here, once, if missing), CoreDNS has rolled out, and a probe
// pod placed by the scheduler resolved clusterdns.ProbeNames through it.
// As with the node probe, every step is decided from what the member
// holds: the kube-dns Service records the UID of the probe pod that
// succeeded (AnnotationDNSProbed), and the pod is deleted before hand-out.

// AnnotationDNSProbed on the member's kube-dns Service records the UID of
// the DNSHealthy probe pod that resolved every name.
const AnnotationDNSProbed = "kobe.kunobi.ninja/dns-probe"

// dnsProbeStep decides the next step of the DNS probe from whether the
// Service records a probe that succeeded, the probe pod (nil when there is
// none) and whether its log already shows every name resolved
// (clusterdns.ProbeResolved; seen before the kubelet reports the exit).
// The message says what the gate waits for.
func dnsProbeStep(probed bool, pod *corev1.Pod, logResolved bool, now time.Time) (probeAction, string) {
	name := clusterdns.ProbePodName
	switch {
	case probed && pod == nil:
		return probeDone, ""
	case probed && pod.DeletionTimestamp != nil:
		return probeWait, fmt.Sprintf("DNS probe pod %s succeeded and is being deleted", name)
	case probed:
		return probeDelete, fmt.Sprintf("DNS probe pod %s succeeded; deleting it", name)
	case pod == nil:
		return probeCreate, fmt.Sprintf("creating DNS probe pod %s", name)
	case pod.DeletionTimestamp != nil:
		return probeWait, fmt.Sprintf("an earlier DNS probe pod %s is being deleted", name)
	case pod.Status.Phase == corev1.PodSucceeded:
		return probeRecord, fmt.Sprintf("DNS probe pod %s resolved %s; deleting it", name, strings.Join(clusterdns.ProbeNames, ", "))
	case pod.Status.Phase == corev1.PodFailed:
		return probeDelete, fmt.Sprintf("DNS probe pod %s failed (%s); trying again", name, notStarted(pod, now))
	case started(pod) && logResolved:
		return probeRecord, fmt.Sprintf("DNS probe pod %s resolved %s (its log); deleting it", name, strings.Join(clusterdns.ProbeNames, ", "))
	case started(pod):
		return probeWait, fmt.Sprintf("DNS probe pod %s is resolving %s", name, strings.Join(clusterdns.ProbeNames, ", "))
	}
	return probeWait, fmt.Sprintf("DNS probe pod %s has not started: %s", name, notStarted(pod, now))
}

// dnsHealthy is the DNSHealthy gate of a member with real nodes.
func dnsHealthy(ctx context.Context, cs kubernetes.Interface, image string, now time.Time) error {
	if image == "" {
		image = clusterdns.Image
	}
	svcs := cs.CoreV1().Services(clusterdns.Namespace)
	svc, err := svcs.Get(ctx, clusterdns.ServiceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		svc = nil
	case err != nil:
		return fmt.Errorf("getting Service %s/%s: %w", clusterdns.Namespace, clusterdns.ServiceName, err)
	}
	probed := svc != nil && svc.Annotations[AnnotationDNSProbed] != ""
	// The probe pod starts while CoreDNS rolls out (it retries its
	// lookups for a while): the two waits overlap. Both must pass.
	var notRolledOut error
	if !probed {
		if err := memberaddons.Ensure(ctx, cs, image); err != nil {
			return err
		}
		d, err := cs.AppsV1().Deployments(clusterdns.Namespace).Get(ctx, clusterdns.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting Deployment %s/%s: %w", clusterdns.Namespace, clusterdns.Name, err)
		}
		notRolledOut = rolledOut(d)
	}
	pods := cs.CoreV1().Pods(clusterdns.Namespace)
	pod, err := pods.Get(ctx, clusterdns.ProbePodName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		pod = nil
	case err != nil:
		return fmt.Errorf("getting DNS probe pod %s: %w", clusterdns.ProbePodName, err)
	}
	action, msg := dnsProbeStep(probed, pod, !probed && probeLogResolved(ctx, cs, pod), now)
	if notRolledOut != nil && action == probeRecord {
		// Resolved, but through a CoreDNS that is not rolled out yet:
		// record nothing until it is.
		return notRolledOut
	}
	switch action {
	case probeDone:
		return nil
	case probeCreate:
		if _, err := pods.Create(ctx, clusterdns.ProbePod(image), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DNS probe pod %s: %w", clusterdns.ProbePodName, err)
		}
	case probeRecord:
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationDNSProbed, pod.UID)
		if _, err := svcs.Patch(ctx, clusterdns.ServiceName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("recording on Service %s that DNS probe pod %s succeeded: %w", clusterdns.ServiceName, pod.Name, err)
		}
		fallthrough
	case probeDelete:
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](probeDeleteGrace),
			Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting DNS probe pod %s: %w", pod.Name, err)
		}
	case probeWait:
		if pod != nil && !started(pod) && pod.DeletionTimestamp == nil && !kubeletSaysWhy(pod) {
			if w := lastWarning(ctx, cs, pod); w != "" {
				msg += "; last warning: " + w
			}
		}
	}
	if notRolledOut != nil {
		msg = notRolledOut.Error() + "; " + msg
	}
	return errors.New(msg)
}

// probeLogResolved reads a running probe pod's log (a request to its
// kubelet through the API server) and tells whether it shows every name
// resolved. Anything unreadable is "not yet": the pod's phase still tells.
func probeLogResolved(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) bool {
	if pod == nil || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	raw, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{LimitBytes: ptr.To[int64](4096)}).DoRaw(ctx)
	return err == nil && clusterdns.ProbeResolved(string(raw))
}
