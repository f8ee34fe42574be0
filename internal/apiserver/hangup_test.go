//go:build integration

package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestHangUpsGetNoForeignCredential replays the hang-up attack over HTTP:
// 60 POST /v1/leases against a pool of 4 Ready members, each caller hanging
// up 5-60 ms in, then GET /v1/leases/{id} of every lease. Every kubeconfig
// returned names a member whose write-once leaseRef, read live, names that
// lease; so no member that a returned kubeconfig names is bound to another
// lease, and no member has kubeconfigs for two leases.
func TestHangUpsGetNoForeignCredential(t *testing.T) {
	const poolName = "zz-hangup"
	creds := tokenOf("everything")
	makeHangupPool(t, poolName, 4)

	type minted struct{ lease, member, via string }
	var mu sync.Mutex
	var kcs []minted
	record := func(via, kc string) {
		if kc == "" {
			return
		}
		cfg, err := clientcmd.Load([]byte(kc))
		if err != nil {
			t.Errorf("%s returned a kubeconfig that does not parse: %v", via, err)
			return
		}
		c := cfg.Contexts[cfg.CurrentContext]
		if c == nil {
			t.Errorf("%s returned a kubeconfig without a current context", via)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		kcs = append(kcs, minted{lease: c.AuthInfo, member: c.Cluster, via: via})
	}
	uids := map[string]string{}
	// A loaded machine (the race detector, other packages' control planes)
	// may answer none of 60 requests within 60 ms: then the round tested
	// nothing, and runs again with callers who wait longer.
	for _, window := range []time.Duration{60 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		var wg sync.WaitGroup
		for range 60 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond+rand.N(window-5*time.Millisecond))
				defer cancel()
				req := prepare(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: poolName})
				r, err := roundTrip(req.WithContext(ctx))
				if err != nil || r.code != http.StatusCreated {
					return // hung up, or answered Pending
				}
				var l wire.Lease
				if err := json.Unmarshal(r.body, &l); err != nil {
					t.Errorf("POST answer %s: %v", r, err)
					return
				}
				record("POST", l.Kubeconfig)
			})
		}
		wg.Wait()

		var ls kobev1.ClusterLeaseList
		if err := fx.env.Client.List(t.Context(), &ls, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: poolName}); err != nil {
			t.Fatal(err)
		}
		for _, l := range ls.Items {
			uids[l.Name] = string(l.UID)
			r := call(t, creds, http.MethodGet, "/v1/leases/"+l.Name, nil)
			if r.code == http.StatusNotFound && gone(t, l.Name) {
				continue // withdrawn: one lease too many waiting for this caller (the cap on waiting leases)
			}
			got := decode[wire.Lease](t, r, http.StatusOK)
			record("GET", got.Kubeconfig)
		}
		t.Logf("callers hanging up within %s: %d leases in the pool, %d kubeconfigs returned so far", window, len(ls.Items), len(kcs))
		if len(kcs) > 0 {
			break
		}
	}
	holder := map[string]string{}
	for _, k := range kcs {
		inst := &kobev1.ClusterInstance{}
		if err := fx.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: k.member}, inst); err != nil {
			t.Fatalf("member %s of a returned kubeconfig: %v", k.member, err)
		}
		if inst.Spec.LeaseRef == nil || string(inst.Spec.LeaseRef.UID) != uids[k.lease] {
			t.Errorf("%s returned a kubeconfig of lease %s for member %s, whose leaseRef is %+v", k.via, k.lease, k.member, inst.Spec.LeaseRef)
		}
		if prev, ok := holder[k.member]; ok && prev != k.lease {
			t.Errorf("member %s has kubeconfigs for two leases: %s and %s", k.member, prev, k.lease)
		}
		holder[k.member] = k.lease
	}
	t.Logf("%d leases, %d kubeconfigs returned, for %d members", len(uids), len(kcs), len(holder))
	if len(holder) == 0 {
		t.Fatal("no kubeconfig at all: the run tested nothing")
	}
}

// makeHangupPool creates a pool with members Ready members (each with an
// access Secret of its own CAs) once the API's cache sees them, and
// removes everything at the end of the test, so that other tests' pool
// listings are as before.
func makeHangupPool(t *testing.T, name string, members int) {
	t.Helper()
	ctx, c := t.Context(), fx.env.Client
	serverCA, err := pki.NewCA("hangup-server-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := pki.NewCA("hangup-client-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	access := &backend.Access{Endpoint: "https://127.0.0.1:6443", CACert: serverCA.CertPEM,
		ClientCACert: clientCA.CertPEM, ClientCAKey: clientCA.KeyPEM, AdminKubeconfig: []byte("unused")}
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](0), TTL: &metav1.Duration{Duration: 30 * time.Minute}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = c.DeleteAllOf(ctx, &kobev1.ClusterLease{}, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: name})
		_ = c.DeleteAllOf(ctx, &kobev1.ClusterInstance{}, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: name})
		_ = c.Delete(ctx, p)
	})
	for i := range members + 1 {
		inst := &kobev1.ClusterInstance{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", name, i), Namespace: ns, Labels: map[string]string{kobev1.LabelPool: name}},
			Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: name}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
		}
		if err := c.Create(ctx, inst); err != nil {
			t.Fatal(err)
		}
		accesstest.Publish(t, inst, access)
		inst.Status.Phase = kobev1.InstanceReady
		if err := c.Status().Update(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	// The API binds from its cache. One member more than asked for, bound
	// by a request that waits for its answer, shows the cache has them; its
	// lease is released (nothing recycles its member here), leaving members
	// Ready members.
	eventually(t, "the API to bind a lease of "+name, func(ctx context.Context) bool {
		r := call(t, tokenOf("everything"), http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: name})
		var l wire.Lease
		if err := json.Unmarshal(r.body, &l); err != nil || (r.code != http.StatusCreated && r.code != http.StatusAccepted) {
			t.Fatalf("probe lease: %s", r)
		}
		if r := call(t, tokenOf("everything"), http.MethodDelete, "/v1/leases/"+l.ID, nil); r.code != http.StatusNoContent {
			t.Fatalf("releasing the probe lease: %s", r)
		}
		return l.Phase == wire.PhaseBound
	})
}

// gone reports whether lease name no longer exists on the API server.
func gone(t *testing.T, name string) bool {
	t.Helper()
	err := fx.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &kobev1.ClusterLease{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}
