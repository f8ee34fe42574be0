//go:build integration

package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/contract"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// contractHold is the finalizer that keeps contract-deleting in deletion.
const contractHold = "kobe.kunobi.ninja/contract-test-hold"

// TestContract runs the contract table (internal/contract) against the real
// API, as apiclienttest's TestContract runs it against the Go client's fake.
// Its pools, members and policies are its own (contract-*).
func TestContract(t *testing.T) {
	ctx := t.Context()
	c := fx.env.Client
	const readyMembers = 12

	// Members first, so that the manager's cache has them long before the
	// policies that the wait below observes.
	pool := func(name string, size int32, finalizers ...string) *kobev1.ClusterPool {
		return &kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: finalizers},
			Spec: kobev1.ClusterPoolSpec{
				Size: ptr.To(size), TTL: &metav1.Duration{Duration: time.Hour},
				Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal},
			},
		}
	}
	create := func(o client.Object) {
		t.Helper()
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	ready := pool("contract-ready", 0)
	create(ready)
	createReadyMembers(t, ready.Name, readyMembers)
	create(pool("contract-empty", 0))

	deleting := pool("contract-deleting", 0, contractHold)
	create(deleting)
	t.Cleanup(func() {
		p := &kobev1.ClusterPool{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(deleting), p); err == nil {
			p.Finalizers = nil
			_ = c.Update(context.Background(), p)
		}
	})
	if err := c.Delete(ctx, deleting); err != nil {
		t.Fatal(err)
	}

	unavailable := pool("contract-unavailable", 1)
	create(unavailable)
	meta.SetStatusCondition(&unavailable.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionCapacity, Status: metav1.ConditionFalse, Reason: kobev1.ReasonBackendUnavailable,
		Message: "backend local is not wired in this operator", ObservedGeneration: unavailable.Generation,
	})
	if err := c.Status().Update(ctx, unavailable); err != nil {
		t.Fatal(err)
	}

	quarantined := pool("contract-quarantined", 1)
	create(quarantined)
	quarantined.Status.Quarantined = 1
	if err := c.Status().Update(ctx, quarantined); err != nil {
		t.Fatal(err)
	}

	for _, tp := range []struct {
		name string
		rule kobev1.AccessRule
	}{
		{"contract-allowed", kobev1.AccessRule{Pools: []string{"contract-*"}}},
		{"contract-other", kobev1.AccessRule{Pools: []string{"contract-*"}}},
		{"contract-limited", kobev1.AccessRule{Pools: []string{"contract-*"}, MaxConcurrentLeases: ptr.To[int32](1)}},
		{"contract-denied", kobev1.AccessRule{Pools: []string{"elsewhere-*"}}},
	} {
		for _, o := range tokenPolicy(tp.name, tp.rule) {
			create(o)
		}
	}
	// The manager's cache has seen the pools and policies once each caller
	// reads the last pool made.
	for _, name := range []string{"contract-allowed", "contract-other", "contract-limited"} {
		eventually(t, name+" sees contract-quarantined", func(context.Context) bool {
			return call(t, tokenOf(name), http.MethodGet, "/v1/pools/contract-quarantined", nil).code == http.StatusOK
		})
	}
	eventually(t, "contract-denied is authenticated", func(context.Context) bool {
		return call(t, tokenOf("contract-denied"), http.MethodGet, "/v1/pools", nil).code == http.StatusOK
	})

	contract.Run(t, contract.Target{
		URL:             fx.url,
		Allowed:         tokenOf("contract-allowed"),
		Other:           tokenOf("contract-other"),
		Limited:         tokenOf("contract-limited"),
		Denied:          tokenOf("contract-denied"),
		Invalid:         apiclient.BearerToken("contract-wrong-token"),
		ReadyPool:       ready.Name,
		EmptyPool:       "contract-empty",
		DeletingPool:    deleting.Name,
		UnavailablePool: unavailable.Name,
		QuarantinedPool: quarantined.Name,
		MissingPool:     "contract-missing",
		MaxExtensions:   int(lease.DefaultMaxExtensions),
		MaxBodyBytes:    apiserver.DefaultMaxBodyBytes,
	})
}

// createReadyMembers creates n Ready members of pool with access Secrets, as
// createWorld does.
func createReadyMembers(t *testing.T, pool string, n int) {
	t.Helper()
	ctx := t.Context()
	const caValidity = 24 * time.Hour
	serverCA, err := pki.NewCA("contract-server-ca", caValidity)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := pki.NewCA("contract-client-ca", caValidity)
	if err != nil {
		t.Fatal(err)
	}
	access := &backend.Access{
		Endpoint: "https://127.0.0.1:6443", CACert: serverCA.CertPEM,
		ClientCACert: clientCA.CertPEM, ClientCAKey: clientCA.KeyPEM, AdminKubeconfig: []byte("unused"),
	}
	for i := range n {
		inst := &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%02d", pool, i), Namespace: ns,
				Labels: map[string]string{kobev1.LabelPool: pool},
			},
			Spec: kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: pool}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
		}
		if err := fx.env.Client.Create(ctx, inst); err != nil {
			t.Fatalf("creating member %s: %v", inst.Name, err)
		}
		accesstest.Publish(t, inst, access)
		inst.Status.Phase = kobev1.InstanceReady
		if err := fx.env.Client.Status().Update(ctx, inst); err != nil {
			t.Fatalf("making member %s Ready: %v", inst.Name, err)
		}
	}
}
