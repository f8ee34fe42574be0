package nodestorage

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kunobi-ninja/kobe/internal/node"
)

// Provisioner makes and removes the volumes of one node.
type Provisioner struct {
	Client client.Client
	// Node is the node's name in the member.
	Node string
	// Root is where the volumes' directories are made: node.StorageRoot
	// in the node's mount namespace (a test's directory in unit tests).
	Root string
}

// ReconcileClaim makes the volume of a claim scheduled to this node: its
// directory, then the PV bound to the claim (the PV controller completes
// the binding). A PV of that name that exists already is left as it is.
func (p *Provisioner) ReconcileClaim(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	claim := &corev1.PersistentVolumeClaim{}
	if err := p.Client.Get(ctx, req.NamespacedName, claim); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !wantsVolume(claim, p.Node) {
		return ctrl.Result{}, nil
	}
	class := &storagev1.StorageClass{}
	if err := p.Client.Get(ctx, client.ObjectKey{Name: ptr.Deref(claim.Spec.StorageClassName, "")}, class); err != nil {
		return ctrl.Result{}, fmt.Errorf("getting the claim's StorageClass: %w", err)
	}
	if class.Provisioner != ProvisionerName {
		return ctrl.Result{}, nil
	}
	pv, err := volumeFor(claim, class, p.Node)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := p.Client.Get(ctx, client.ObjectKeyFromObject(pv), &corev1.PersistentVolume{}); err == nil {
		return ctrl.Result{}, nil
	} else if !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	dir := filepath.Join(p.Root, pv.Name)
	// World-writable, as kind's and k3d's volumes are: the claim's pods
	// may run as any user. Only mounts of this directory reach it.
	if err := os.Mkdir(dir, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
		return ctrl.Result{}, fmt.Errorf("making the volume's directory: %w", err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return ctrl.Result{}, err
	}
	if err := p.Client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating PersistentVolume %s: %w", pv.Name, err)
	}
	return ctrl.Result{}, nil
}

// ReconcileVolume removes a released volume of this node: its directory,
// then the PV.
func (p *Provisioner) ReconcileVolume(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pv := &corev1.PersistentVolume{}
	if err := p.Client.Get(ctx, req.NamespacedName, pv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	name, ok := reclaimable(pv, p.Node)
	if !ok {
		return ctrl.Result{}, nil
	}
	if err := os.RemoveAll(filepath.Join(p.Root, name)); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing the volume's directory: %w", err)
	}
	err := p.Client.Delete(ctx, pv, client.Preconditions{UID: &pv.UID})
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

// rbacWait bounds how long Run waits for its permissions (the gate creates
// them once the member's nodes are Ready).
const rbacWait = 10 * time.Minute

// Run runs the provisioner of nodeName with the kubeconfig (the kubelet's)
// until ctx ends. It first waits until the default StorageClass is
// readable, which is also when the gate has granted the nodes' permissions:
// watches started before would back off for up to a minute.
func Run(ctx context.Context, kubeconfig, nodeName string, logOut io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, rbacWait, true, func(ctx context.Context) (bool, error) {
		return direct.Get(ctx, client.ObjectKey{Name: ClassName}, &storagev1.StorageClass{}) == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for StorageClass %s and the nodes' permissions: %w", ClassName, err)
	}
	log := zap.New(zap.WriteTo(logOut))
	ctrl.SetLogger(log)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 log,
	})
	if err != nil {
		return err
	}
	p := &Provisioner{Client: mgr.GetClient(), Node: nodeName, Root: node.StorageRoot}
	if err := ctrl.NewControllerManagedBy(mgr).Named("claims").For(&corev1.PersistentVolumeClaim{}).
		Complete(reconcileFunc(p.ReconcileClaim)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("volumes").For(&corev1.PersistentVolume{}).
		Complete(reconcileFunc(p.ReconcileVolume)); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

type reconcileFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f reconcileFunc) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return f(ctx, req)
}

// Main is the "kobe-node storage" daemon: kobe-node starts it in the node's
// namespaces once kubelet runs, and supervises it like the others.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("kobe-node storage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "the node's kubeconfig (kubelet's)")
	nodeName := fs.String("node", "", "the node's name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *kubeconfig == "" || *nodeName == "" {
		fmt.Fprintln(stderr, "usage: kobe-node storage --kubeconfig FILE --node NAME")
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := Run(ctx, *kubeconfig, *nodeName, stderr); err != nil {
		fmt.Fprintln(stderr, "kobe-node storage:", err)
		return 1
	}
	return 0
}
