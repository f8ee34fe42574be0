package install

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// DemoPolicy is the AccessPolicy (and DemoSecret its token's Secret) that
// Demo creates, with make run's names.
const (
	DemoPolicy = "demo"
	DemoSecret = "kobe-demo-token"
)

// NewClient is a controller-runtime client of cfg that knows Kubernetes',
// kobe's and CustomResourceDefinitions' kinds.
func NewClient(cfg *rest.Config) (client.Client, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := kobev1.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := apiextv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

// Demo creates in ns what hack/run.sh's demo does, with a sim pool instead
// of a local one: the Secret DemoSecret holding token, the AccessPolicy
// DemoPolicy (identity "demo", every pool, TTLs up to 4h, 5 leases at once)
// and the ClusterPool pool of 2 simulated members with a 30m TTL.
func Demo(ctx context.Context, c client.Client, ns, pool, token string) error {
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DemoSecret, Namespace: ns}, StringData: map[string]string{"token": token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: DemoPolicy, Namespace: ns},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: DemoSecret}}},
				Identity: "demo",
				Rules: []kobev1.AccessRule{{Pools: []string{"*"}, MaxTTL: &metav1.Duration{Duration: 4 * time.Hour},
					MaxConcurrentLeases: ptr.To[int32](5)}},
			},
		},
		&kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: ns},
			Spec: kobev1.ClusterPoolSpec{
				Size:    ptr.To[int32](2),
				TTL:     &metav1.Duration{Duration: 30 * time.Minute},
				Backend: kobev1.BackendSpec{Type: kobev1.BackendSim},
			},
		},
	} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// WaitDemoReady waits until the demo AccessPolicy is Ready and the pool
// is Ready with all its members Ready (`kubectl get clusterpools` READY).
func WaitDemoReady(ctx context.Context, c client.Client, ns, pool string, within time.Duration) error {
	return poll(ctx, within, func() error {
		var p kobev1.AccessPolicy
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: DemoPolicy}, &p); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(p.Status.Conditions, kobev1.ConditionReady) {
			return fmt.Errorf("AccessPolicy %s not Ready: %v", DemoPolicy, p.Status.Conditions)
		}
		var cp kobev1.ClusterPool
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pool}, &cp); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cp.Status.Conditions, kobev1.ConditionReady) || cp.Spec.Size == nil || cp.Status.Ready < *cp.Spec.Size {
			return fmt.Errorf("ClusterPool %s: phase %s, %d Ready of %v", pool, cp.Status.Phase, cp.Status.Ready, cp.Spec.Size)
		}
		return nil
	})
}

// Clear ends every lease of ns and deletes its pools and members, then
// waits until no pool or member is left: what the chart README asks before
// helm uninstall (and what make run does on Ctrl-C), because pools and
// members carry finalizers that only a running operator removes, and a
// pool keeps its leased members until their leases end.
func Clear(ctx context.Context, c client.Client, ns string, within time.Duration) error {
	for _, o := range []client.Object{&kobev1.ClusterLease{}, &kobev1.ClusterPool{}, &kobev1.ClusterInstance{}} {
		if err := c.DeleteAllOf(ctx, o, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("deleting every %T of %s: %w", o, ns, err)
		}
	}
	return poll(ctx, within, func() error {
		var pools kobev1.ClusterPoolList
		var members kobev1.ClusterInstanceList
		if err := c.List(ctx, &pools, client.InNamespace(ns)); err != nil {
			return err
		}
		if err := c.List(ctx, &members, client.InNamespace(ns)); err != nil {
			return err
		}
		if n, m := len(pools.Items), len(members.Items); n+m > 0 {
			return fmt.Errorf("%d ClusterPools and %d ClusterInstances left in %s", n, m, ns)
		}
		return nil
	})
}

// poll calls cond every 200 ms until it returns nil, and returns its last
// error when within has passed.
func poll(ctx context.Context, within time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %v: %w", within, err)
		case <-tick.C:
		}
	}
}
