//go:build integration

package leaseservice_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// The service is tested without HTTP against a real kube-apiserver, with a
// manager's cache (and the indexes of package index) as its Reader, as in
// the operator. No controller runs: pools hold pre-made Ready members with
// access Secrets, and nothing ends a lease behind a test's back. Each test
// uses its own pool, so the tests may share one namespace.

const ns = "default"

var fx struct {
	env *testenv.Env
	mgr ctrl.Manager
	// access is what every pre-made member's access Secret holds.
	access *backend.Access
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	log.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "kobe-leaseservice-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	env, stopEnv, err := testenv.New(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := stopEnv(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping test control plane: %v\n", err)
		}
	}()
	mgr, err := ctrl.NewManager(env.Config, env.ManagerOptions(ns))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := index.Setup(context.Background(), mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop, err := testenv.RunManager(mgr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()
	serverCA, err := pki.NewCA("leaseservice-test-server-ca", 30*24*time.Hour)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	clientCA, err := pki.NewCA("leaseservice-test-client-ca", 30*24*time.Hour)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fx.env, fx.mgr = env, mgr
	fx.access = &backend.Access{
		Endpoint: "https://127.0.0.1:6443", CACert: serverCA.CertPEM,
		ClientCACert: clientCA.CertPEM, ClientCAKey: clientCA.KeyPEM, AdminKubeconfig: []byte("unused"),
	}
	return m.Run()
}

// newService is one replica's lease service: each has its own in-process
// locks, as two operator replicas would.
func newService(mut ...func(*leaseservice.Options)) *leaseservice.Service {
	clk := clock.RealClock{}
	opts := leaseservice.Options{
		Namespace: ns,
		Client:    fx.mgr.GetClient(),
		Reader:    fx.mgr.GetClient(),
		APIReader: fx.mgr.GetAPIReader(),
		Binder:    &binding.Binder{Client: fx.mgr.GetClient(), Reader: fx.mgr.GetClient(), Clock: clk},
		Clock:     clk,
		Log:       logr.Discard(),
		Access:    accesstest.Sealer(),
	}
	for _, f := range mut {
		f(&opts)
	}
	return leaseservice.New(opts)
}

// makePool creates pool name with members Ready members (each with its
// sealed access material) and waits until the cache sees them.
func makePool(t *testing.T, name string, members int, mut ...func(*kobev1.ClusterPool)) *kobev1.ClusterPool {
	t.Helper()
	ctx, c := t.Context(), fx.env.Client
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To[int32](0), TTL: &metav1.Duration{Duration: 30 * time.Minute},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal},
		},
	}
	for _, f := range mut {
		f(p)
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatalf("creating pool %s: %v", name, err)
	}
	for i := range members {
		inst := &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", name, i), Namespace: ns, Labels: map[string]string{kobev1.LabelPool: name}},
			Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: name}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
		}
		if err := c.Create(ctx, inst); err != nil {
			t.Fatalf("creating member %s: %v", inst.Name, err)
		}
		accesstest.Publish(t, inst, fx.access)
		inst.Status.Phase = kobev1.InstanceReady
		if err := c.Status().Update(ctx, inst); err != nil {
			t.Fatalf("making member %s Ready: %v", inst.Name, err)
		}
	}
	testenv.Eventually(t, 15*time.Second, "the cache to see pool "+name, func() error {
		var insts kobev1.ClusterInstanceList
		if err := fx.mgr.GetClient().List(ctx, &insts, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: name}); err != nil {
			return err
		}
		ready := 0
		for i := range insts.Items {
			if lease.Bindable(&insts.Items[i]) {
				ready++
			}
		}
		if err := fx.mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(p), &kobev1.ClusterPool{}); err != nil {
			return err
		}
		if ready != members {
			return fmt.Errorf("%d of %d members Ready in the cache", ready, members)
		}
		return nil
	})
	return p
}

// leaseObject reads a ClusterLease from the API server.
func leaseObject(t *testing.T, name string) *kobev1.ClusterLease {
	t.Helper()
	l := &kobev1.ClusterLease{}
	if err := fx.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		t.Fatalf("reading lease %s: %v", name, err)
	}
	return l
}

// waitRecorded waits for the status copy of a bind answered by the fast
// path (written after the answer) and returns the lease.
func waitRecorded(t *testing.T, name string) *kobev1.ClusterLease {
	t.Helper()
	var l *kobev1.ClusterLease
	testenv.Eventually(t, 10*time.Second, "lease "+name+" to record its bind", func() error {
		l = leaseObject(t, name)
		if l.Status.Phase != kobev1.LeaseBound || l.Status.InstanceRef == nil || l.Status.ExpiresAt == nil {
			return fmt.Errorf("phase %q, instance %+v", l.Status.Phase, l.Status.InstanceRef)
		}
		return nil
	})
	return l
}

// leasesOfPool lists a pool's ClusterLeases from the API server.
func leasesOfPool(t *testing.T, pool string) []kobev1.ClusterLease {
	t.Helper()
	var ls kobev1.ClusterLeaseList
	if err := fx.env.Client.List(t.Context(), &ls, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: pool}); err != nil {
		t.Fatal(err)
	}
	return ls.Items
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
