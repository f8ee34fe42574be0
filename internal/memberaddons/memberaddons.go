// Package memberaddons creates what every member with nodes runs besides
// its own workloads: the cluster DNS (internal/clusterdns) and the default
// StorageClass with its provisioners' permissions (internal/nodestorage).
// The DNSHealthy readiness gate calls Ensure until the DNS answers; the
// local backend calls it too as soon as a member's nodes start, so that
// CoreDNS is scheduled the moment a node registers.
package memberaddons

import (
	"context"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/clusterdns"
	"github.com/kunobi-ninja/kobe/internal/nodestorage"
)

// Ensure creates the objects of the member's cluster DNS (CoreDNS of
// image) and of its default StorageClass that do not exist yet; an object
// that exists is left as it is (the member is the lease holder's once
// handed out, and before that only kobe writes it). The DNS Service takes
// the tenth address of the range the API server's own Service is the first
// of, the address the backends gave every kubelet.
func Ensure(ctx context.Context, cs kubernetes.Interface, image string) error {
	// A Service created again fails on its address, which the existing
	// one holds, before its name: look first.
	_, err := cs.CoreV1().Services(clusterdns.Namespace).Get(ctx, clusterdns.ServiceName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting Service %s/%s: %w", clusterdns.Namespace, clusterdns.ServiceName, err)
	}
	haveService := err == nil
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
