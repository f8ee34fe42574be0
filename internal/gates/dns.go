package gates

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/nodestorage"
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
// Service records a probe that succeeded and the probe pod (nil when there
// is none). The message says what the gate waits for.
func dnsProbeStep(probed bool, pod *corev1.Pod, now time.Time) (probeAction, string) {
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
	if !probed {
		if err := ensureClusterDNS(ctx, cs, image, svc != nil); err != nil {
			return err
		}
		d, err := cs.AppsV1().Deployments(clusterdns.Namespace).Get(ctx, clusterdns.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting Deployment %s/%s: %w", clusterdns.Namespace, clusterdns.Name, err)
		}
		if err := rolledOut(d); err != nil {
			return err
		}
	}
	pods := cs.CoreV1().Pods(clusterdns.Namespace)
	pod, err := pods.Get(ctx, clusterdns.ProbePodName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		pod = nil
	case err != nil:
		return fmt.Errorf("getting DNS probe pod %s: %w", clusterdns.ProbePodName, err)
	}
	action, msg := dnsProbeStep(probed, pod, now)
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
	return errors.New(msg)
}

// ensureClusterDNS creates the objects of the member's cluster DNS and of
// its default StorageClass (the nodes' volume provisioners wait for them)
// that do not exist yet (an object that exists is left as it is: the
// member is the lease holder's once handed out, and before that only kobe
// writes it). The
// Service takes the tenth address of the range the API server's own
// Service is the first of, the address the backends gave every kubelet.
// haveService says the Service exists: creating it again would fail on its
// address, which the existing one holds, before its name.
func ensureClusterDNS(ctx context.Context, cs kubernetes.Interface, image string, haveService bool) error {
	api, err := cs.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting Service default/kubernetes (the Service range): %w", err)
	}
	first, err := netip.ParseAddr(api.Spec.ClusterIP)
	if err != nil {
		return fmt.Errorf("the clusterIP %q of Service default/kubernetes: %w", api.Spec.ClusterIP, err)
	}
	ip, err := clusterdns.ServiceIP(netip.PrefixFrom(first.Prev(), 24))
	if err != nil {
		return err
	}
	for _, obj := range append(clusterdns.Objects(ip, image), nodestorage.Objects()...) {
		if _, isService := obj.(*corev1.Service); isService && haveService {
			continue
		}
		if err := createIfMissing(ctx, cs, obj); err != nil {
			return err
		}
	}
	return nil
}

func createIfMissing(ctx context.Context, cs kubernetes.Interface, obj client.Object) error {
	opts := metav1.CreateOptions{FieldManager: "kobe"}
	var err error
	var what string
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		what = "ServiceAccount " + o.Name
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		what = "ClusterRole " + o.Name
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		what = "ClusterRoleBinding " + o.Name
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	case *corev1.ConfigMap:
		what = "ConfigMap " + o.Name
		_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
	case *corev1.Service:
		what = "Service " + o.Name
		_, err = cs.CoreV1().Services(o.Namespace).Create(ctx, o, opts)
	case *appsv1.Deployment:
		what = "Deployment " + o.Name
		_, err = cs.AppsV1().Deployments(o.Namespace).Create(ctx, o, opts)
	case *storagev1.StorageClass:
		what = "StorageClass " + o.Name
		_, err = cs.StorageV1().StorageClasses().Create(ctx, o, opts)
	default:
		return fmt.Errorf("no way to create a %T", obj)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the %s: %w", what, err)
	}
	return nil
}
