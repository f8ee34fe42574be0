package gates

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
)

// Result is the outcome of one gate.
type Result struct {
	// Name is the gate's key: the ClusterInstance condition that reports it.
	Name string
	// Builtin is whether the operator evaluated it (else it is a condition
	// something else sets).
	Builtin bool
	Passed  bool
	// Message says what is missing; it never carries credentials.
	Message string
}

// AllPassed reports whether every result passed.
func AllPassed(rs []Result) bool {
	for _, r := range rs {
		if !r.Passed {
			return false
		}
	}
	return true
}

// Options tune EvaluateMember.
type Options struct {
	// Timeout bounds every request to the member.
	Timeout time.Duration
	// Nodes is how many real nodes the member asks for. When positive,
	// NodesReady means that many nodes are Ready and a probe pod started on
	// each Ready node and is gone again (probe.go); otherwise it means one
	// node is Ready (a kwok node, whose pods only pretend to run).
	Nodes int32
	// ProbeImage is the probe pods' image; DefaultProbeImage when empty.
	ProbeImage string
	// DNSImage is the CoreDNS image that DNSHealthy deploys and probes
	// with; clusterdns.Image when empty.
	DNSImage string
	// Now is the time of the evaluation (messages say how long a probe pod
	// has waited); time.Now() when zero.
	Now time.Time
}

// Evaluate runs the gates in order with the member's admin kubeconfig, for
// a member without real nodes; see EvaluateMember.
func Evaluate(ctx context.Context, kubeconfig []byte, gates []kobev1.ReadinessGate, conds []metav1.Condition, timeout time.Duration) []Result {
	return EvaluateMember(ctx, kubeconfig, gates, conds, Options{Timeout: timeout})
}

// EvaluateMember runs the gates in order with the member's admin
// kubeconfig. External gates are read from conds, the ClusterInstance's
// conditions. When the API server is unreachable, the other built-in gates
// are reported pending without being tried.
func EvaluateMember(ctx context.Context, kubeconfig []byte, gates []kobev1.ReadinessGate, conds []metav1.Condition, opts Options) []Result {
	timeout := opts.Timeout
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	var cs *kubernetes.Clientset
	var connectErr error
	needAPI := slices.ContainsFunc(gates, func(g kobev1.ReadinessGate) bool { return kobev1.IsBuiltinGate(g.Type) })
	if needAPI {
		var closeIdle func()
		cs, closeIdle, connectErr = newClient(kubeconfig, timeout)
		if closeIdle != nil {
			defer closeIdle()
		}
	}
	reachable := connectErr == nil
	out := make([]Result, 0, len(gates))
	for _, g := range gates {
		r := Result{Name: g.Key(), Builtin: kobev1.IsBuiltinGate(g.Type)}
		var err error
		switch {
		case !r.Builtin:
			err = external(conds, r.Name)
		case g.Type == kobev1.GateBootstrapsComplete || g.Type == kobev1.GateAddonsReady:
			// The member's controller applies the bundles and sets it.
			err = external(conds, kobev1.ConditionBootstrapsComplete)
		case g.Type == kobev1.GateURLHealthy:
			// From the operator's network: it needs no member API.
			err = urlHealthy(ctx, g.URL, timeout)
		case connectErr != nil:
			err = connectErr
		case g.Type == kobev1.GateAPIServerReachable:
			err = readyz(ctx, cs)
			reachable = err == nil
		case !reachable:
			err = errors.New("waiting for " + kobev1.GateAPIServerReachable)
		case g.Type == kobev1.GateInClusterToken:
			err = inClusterToken(ctx, cs)
		case g.Type == kobev1.GateDefaultServiceAccount:
			err = defaultServiceAccount(ctx, cs)
		case g.Type == kobev1.GateNodesReady && opts.Nodes > 0:
			err = probeNodes(ctx, cs, opts.Nodes, opts.ProbeImage, opts.Now)
		case g.Type == kobev1.GateNodesReady:
			err = nodesReady(ctx, cs)
		case g.Type == kobev1.GateDNSHealthy && opts.Nodes > 0:
			err = dnsHealthy(ctx, cs, opts.DNSImage, opts.Now)
		case g.Type == kobev1.GateDNSHealthy:
			err = errors.New("the member has no real nodes, so no cluster DNS (backend.local.nodes or backend.kubernetes.nodes)")
		case g.Type == kobev1.GateCRDExists:
			err = crdEstablished(ctx, cs, g.CRD)
		case g.Type == kobev1.GateDeploymentReady:
			err = deploymentRolledOut(ctx, cs, g.Deployment)
		}
		r.Passed = err == nil
		if err != nil {
			r.Message = err.Error()
		} else {
			r.Message = "passed"
		}
		out = append(out, r)
	}
	return out
}

// Probe is the health probe of a Ready member: GET /readyz within timeout.
func Probe(ctx context.Context, kubeconfig []byte, timeout time.Duration) error {
	cs, closeIdle, err := newClient(kubeconfig, timeout)
	if err != nil {
		return err
	}
	defer closeIdle()
	return readyz(ctx, cs)
}

// NodesReady checks that the member has at least want nodes and that every
// node is Ready: the check of a member with nodes after its thaw.
func NodesReady(ctx context.Context, kubeconfig []byte, want int32, timeout time.Duration) error {
	cs, closeIdle, err := newClient(kubeconfig, timeout)
	if err != nil {
		return err
	}
	defer closeIdle()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	if len(nodes.Items) < int(want) {
		return fmt.Errorf("%d of %d nodes registered", len(nodes.Items), want)
	}
	for i := range nodes.Items {
		if !isReady(&nodes.Items[i]) {
			return fmt.Errorf("node %s is not Ready, or still tainted unreachable", nodes.Items[i].Name)
		}
	}
	return nil
}

// newClient builds a clientset with its own transport, so that closing its
// idle connections afterwards leaves nothing behind.
func newClient(kubeconfig []byte, timeout time.Duration) (*kubernetes.Clientset, func(), error) {
	cfg, err := memberaccess.RESTConfig(kubeconfig, timeout, "gates")
	if err != nil {
		return nil, nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building an HTTP client for the member: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		hc.CloseIdleConnections()
		return nil, nil, fmt.Errorf("building a client for the member: %w", err)
	}
	return cs, hc.CloseIdleConnections, nil
}

func readyz(ctx context.Context, cs *kubernetes.Clientset) error {
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("GET /readyz: %w", err)
	}
	return nil
}

func inClusterToken(ctx context.Context, cs *kubernetes.Clientset) error {
	tr, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).CreateToken(ctx, "default",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return errors.New(`ServiceAccount default/default does not exist yet`)
	}
	if err != nil {
		return fmt.Errorf("requesting a token for ServiceAccount default/default: %w", err)
	}
	rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("reviewing the ServiceAccount token: %w", err)
	}
	if !rev.Status.Authenticated {
		return fmt.Errorf("the ServiceAccount token does not authenticate: %s", rev.Status.Error)
	}
	if want := "system:serviceaccount:default:default"; rev.Status.User.Username != want {
		return fmt.Errorf("the ServiceAccount token authenticates as %q, not %q", rev.Status.User.Username, want)
	}
	return nil
}

func defaultServiceAccount(ctx context.Context, cs *kubernetes.Clientset) error {
	_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return errors.New(`ServiceAccount default/default does not exist yet`)
	}
	if err != nil {
		return fmt.Errorf("getting ServiceAccount default/default: %w", err)
	}
	return nil
}

func nodesReady(ctx context.Context, cs *kubernetes.Clientset) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
	}
	return fmt.Errorf("none of %d nodes is Ready", len(nodes.Items))
}

func external(conds []metav1.Condition, t string) error {
	c := meta.FindStatusCondition(conds, t)
	switch {
	case c == nil:
		return fmt.Errorf("condition %s is not set on the ClusterInstance", t)
	case c.Status != metav1.ConditionTrue:
		return fmt.Errorf("condition %s is %s: %s", t, c.Status, c.Message)
	}
	return nil
}
