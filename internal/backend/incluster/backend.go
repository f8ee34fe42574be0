package incluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// Options configure a Backend.
type Options struct {
	// Type is the backend type the Backend serves (kobev1.BackendKubernetes).
	Type kobev1.BackendType
	// Template renders the member's pods.
	Template Template
	// Capabilities are reported as they are.
	Capabilities backend.Capabilities
	// Client reads and writes the host objects. Reads must be live (an
	// uncached client, e.g. client.New), since Observe's verdict reaps.
	Client client.Client
	// Namespace is the namespace Sweep searches: the operator's own.
	Namespace string
	// OperatorSelector are the labels of the operator's pods, which the
	// NetworkPolicy lets reach the member's API port. Required.
	OperatorSelector map[string]string
	// UnschedulableTimeout is how long a pod may stay unschedulable before
	// the member is reported Failed (DefaultUnschedulableTimeout when 0),
	// so that a cluster autoscaler has time to add a node.
	UnschedulableTimeout time.Duration
	// Log receives what Sweep removes.
	Log logr.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// DefaultNodes answers backend.NodeDefaulter (nil: members get no node
	// unless their pool asks).
	DefaultNodes func(spec *kobev1.ClusterPoolSpec) (int32, string)
	// HostRanges are the host cluster's ranges, which the NetworkPolicy of
	// a member whose egress opens anything excepts (nil: none).
	HostRanges *HostRanges
	// EnforcesLimits: the Template renders members' spec.cluster.limits
	// (backend.LimitEnforcer); a backend whose template does not is not
	// given any.
	EnforcesLimits bool
	// Exec runs commands in node pods (kobe load); with NodeImport, the
	// command that imports an image archive read from standard input into
	// a node's containerd. Without them members take no images
	// (backend.ImageLoader answers that it cannot).
	Exec       PodExec
	NodeImport []string
}

// DefaultUnschedulableTimeout is Options.UnschedulableTimeout's default.
const DefaultUnschedulableTimeout = 2 * time.Minute

// Backend runs members as host-cluster objects rendered by a Template.
type Backend struct {
	opts Options
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.Sweeper       = (*Backend)(nil)
	_ backend.LeakFinder    = (*Backend)(nil)
	_ backend.NodeDefaulter = (*Backend)(nil)
	_ backend.LimitEnforcer = (*Backend)(nil)
)

// New checks the options and returns the Backend.
func New(o Options) (*Backend, error) {
	switch {
	case o.Type == "":
		return nil, errors.New("incluster: Type is required")
	case o.Template == nil:
		return nil, errors.New("incluster: Template is required")
	case o.Client == nil:
		return nil, errors.New("incluster: Client is required")
	case o.Namespace == "":
		return nil, errors.New("incluster: Namespace is required")
	case len(o.OperatorSelector) == 0:
		return nil, errors.New("incluster: OperatorSelector is required (the operator's pod labels the NetworkPolicy admits)")
	}
	if o.UnschedulableTimeout == 0 {
		o.UnschedulableTimeout = DefaultUnschedulableTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Backend{opts: o}, nil
}

// Type implements backend.Backend.
func (b *Backend) Type() kobev1.BackendType { return b.opts.Type }

// DefaultNodes implements backend.NodeDefaulter with Options.DefaultNodes.
func (b *Backend) DefaultNodes(spec *kobev1.ClusterPoolSpec) (int32, string) {
	if b.opts.DefaultNodes == nil {
		return 0, "the " + string(b.opts.Type) + " backend gives members no node unless the pool asks"
	}
	return b.opts.DefaultNodes(spec)
}

// EnforcesLimits implements backend.LimitEnforcer with
// Options.EnforcesLimits.
func (b *Backend) EnforcesLimits() (bool, string) {
	if !b.opts.EnforcesLimits {
		return false, "the " + string(b.opts.Type) + " backend does not enforce cluster.limits yet"
	}
	return true, ""
}

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities { return b.opts.Capabilities }

// Create implements backend.Backend. Each step looks before it writes, so a
// call after a crash, or on a member that is complete, only reads: the
// Service first (its ClusterIP goes into the certificates), then the PKI
// Secret, the egress Service (PKINeeds.Egress: its ClusterIP goes into the
// control-plane pods), the NetworkPolicy, the PodDisruptionBudget, and last
// the pods, which are made at most once (AnnotationPodsCreated), as is the
// egress Service.
func (b *Backend) Create(ctx context.Context, m backend.Member) error {
	set, err := b.opts.Template.Settings(m)
	if err != nil {
		return fmt.Errorf("%w: %w", backend.ErrInvalidSpec, err)
	}
	svc := &corev1.Service{}
	if err := b.ensure(ctx, m, renderService(b.opts.Type, m, set.APIPort), svc); err != nil {
		return err
	}
	clusterIP := svc.Spec.ClusterIP
	if clusterIP == "" || clusterIP == corev1.ClusterIPNone {
		return fmt.Errorf("service %s has no ClusterIP", svc.Name)
	}
	sec := &corev1.Secret{}
	err = b.get(ctx, m, secretName(m), sec)
	if apierrors.IsNotFound(err) {
		data, perr := newPKI(m, clusterIP, set.APIPort, set)
		if perr != nil {
			return fmt.Errorf("making the PKI of member %s: %w", m.Name, perr)
		}
		err = b.ensure(ctx, m, renderSecret(b.opts.Type, m, clusterIP, data), sec)
	}
	if err != nil {
		return err
	}
	if sec.Annotations[AnnotationClusterIP] != clusterIP {
		// The Service was re-made with another address: the certificates
		// are for the old one. Nothing here can mend that; Observe reports
		// the member Failed and it is reaped.
		return nil
	}
	if svc.Annotations[AnnotationPodsCreated] != "" {
		return nil // pods are never made twice
	}
	egressIP := ""
	if set.PKI.Egress {
		egress := &corev1.Service{}
		if err := b.ensure(ctx, m, renderEgressService(b.opts.Type, m), egress); err != nil {
			return err
		}
		if egressIP = egress.Spec.ClusterIP; egressIP == "" || egressIP == corev1.ClusterIPNone {
			return fmt.Errorf("service %s has no ClusterIP", egress.Name)
		}
	}
	pods, err := b.renderPods(m, set, clusterIP, egressIP, sec)
	if err != nil {
		return err
	}
	var host []netip.Prefix
	if e := m.Spec.Cluster.EffectiveEgress(); e.Mode == kobev1.EgressPublic || len(e.AllowCIDRs) > 0 {
		// Only a policy with ipBlocks excepts them.
		if host, err = b.opts.HostRanges.Ranges(ctx, b.opts.Now()); err != nil {
			return fmt.Errorf("the NetworkPolicy of member %s: %w", m.Name, err)
		}
	}
	if err := b.ensure(ctx, m, renderNetworkPolicy(b.opts.Type, m, set.APIPort, b.opts.OperatorSelector, host), &networkingv1.NetworkPolicy{}); err != nil {
		return err
	}
	if err := b.ensure(ctx, m, renderPDB(b.opts.Type, m, len(pods)), &policyv1.PodDisruptionBudget{}); err != nil {
		return err
	}
	for i := range pods {
		if err := b.ensure(ctx, m, &pods[i], &corev1.Pod{}); err != nil {
			return err
		}
	}
	patch := client.MergeFrom(svc.DeepCopy())
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[AnnotationPodsCreated] = fmt.Sprint(len(pods))
	if err := b.opts.Client.Patch(ctx, svc, patch); err != nil {
		return fmt.Errorf("recording the pods of member %s on Service %s: %w", m.Name, svc.Name, err)
	}
	return nil
}

// renderPods asks the template for the member's pods and completes them.
func (b *Backend) renderPods(m backend.Member, set Settings, clusterIP, egressIP string, sec *corev1.Secret) ([]corev1.Pod, error) {
	pods, err := b.opts.Template.Pods(RenderInput{Member: m, ClusterIP: clusterIP, APIPort: set.APIPort, PKIDir: PKIDir})
	if err != nil {
		return nil, fmt.Errorf("rendering the pods of member %s: %w", m.Name, err)
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("rendering the pods of member %s: the template made none", m.Name)
	}
	for i := range pods {
		if err := finishPod(b.opts.Type, m, &pods[i], i, set, sec.Data, egressIP); err != nil {
			return nil, fmt.Errorf("rendering pod %d of member %s: %w", i, m.Name, err)
		}
	}
	return pods, nil
}

// ensure reads the object called want's name into got, creating want first
// when there is none (a read before the write: Create runs on every
// reconcile of a member being built). An object of that name that belongs
// to another member is an error: its owner's Delete will remove it, and the
// next attempt goes through.
func (b *Backend) ensure(ctx context.Context, m backend.Member, want, got client.Object) error {
	kind := fmt.Sprintf("%T", want)
	err := b.get(ctx, m, want.GetName(), got)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading %s %s of member %s: %w", kind, want.GetName(), m.Name, err)
	}
	err = b.opts.Client.Create(ctx, want)
	if err == nil {
		return copyInto(want, got)
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s %s of member %s: %w", kind, want.GetName(), m.Name, err)
	}
	if err := b.get(ctx, m, want.GetName(), got); err != nil {
		return fmt.Errorf("reading %s %s of member %s: %w", kind, want.GetName(), m.Name, err)
	}
	return nil
}

// get reads the member's object called name, and refuses one that belongs
// to someone else.
func (b *Backend) get(ctx context.Context, m backend.Member, name string, obj client.Object) error {
	if err := b.opts.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: name}, obj); err != nil {
		return err
	}
	if !ownedBy(obj, m) {
		return fmt.Errorf("%s %s/%s belongs to another member (%s=%q)", fmt.Sprintf("%T", obj), m.Namespace, name,
			LabelMemberUID, obj.GetLabels()[LabelMemberUID])
	}
	return nil
}

// copyInto copies a freshly created object (the API server filled it in) to got.
func copyInto(from, to client.Object) error {
	switch f := from.(type) {
	case *corev1.Service:
		*to.(*corev1.Service) = *f
	case *corev1.Secret:
		*to.(*corev1.Secret) = *f
	case *corev1.Pod:
		*to.(*corev1.Pod) = *f
	case *networkingv1.NetworkPolicy:
		*to.(*networkingv1.NetworkPolicy) = *f
	case *policyv1.PodDisruptionBudget:
		*to.(*policyv1.PodDisruptionBudget) = *f
	default:
		return fmt.Errorf("copying %T: unknown kind", from)
	}
	return nil
}
