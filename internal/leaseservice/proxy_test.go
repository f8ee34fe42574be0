//go:build integration

package leaseservice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestAccessModePerMember: a member reached in Proxy mode gets a kubeconfig
// pointing at the connect proxy (the server's ProxyEndpoint) with kobe's
// CA; a server that cannot proxy refuses such a lease before writing it,
// and refuses the kubeconfig of one already bound: never a Direct one
// instead.
func TestAccessModePerMember(t *testing.T) {
	makePool(t, "proxied", 1, func(p *kobev1.ClusterPool) { p.Spec.Access = &kobev1.AccessSpec{Mode: kobev1.AccessProxy} })
	ctx := t.Context()
	inst := &kobev1.ClusterInstance{}
	if err := fx.env.Client.Get(ctx, clientKey("proxied-00"), inst); err != nil {
		t.Fatal(err)
	}
	inst.Spec.Access = &kobev1.AccessSpec{Mode: kobev1.AccessProxy}
	if err := fx.env.Client.Update(ctx, inst); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the cache to see the member's access mode", func() error {
		got := &kobev1.ClusterInstance{}
		if err := fx.mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(inst), got); err != nil {
			return err
		}
		if got.Spec.Access == nil {
			return errors.New("not yet")
		}
		return nil
	})
	p := caller("proxied", kobev1.AccessRule{Pools: []string{"proxied"}})

	noProxy := newService()
	if _, err := noProxy.Create(ctx, p, leaseservice.CreateRequest{Pool: "proxied"}); !errors.Is(err, leaseservice.ErrProxyNotConfigured) {
		t.Fatalf("Create without a connect proxy: %v, want ErrProxyNotConfigured", err)
	}
	if ls := leasesOfPool(t, "proxied"); len(ls) != 0 {
		t.Fatalf("the refused Create wrote %d leases", len(ls))
	}

	kobeCA := []byte("-----BEGIN CERTIFICATE-----\nkobe\n-----END CERTIFICATE-----\n")
	withProxy := newService(func(o *leaseservice.Options) {
		o.ProxyEndpoint = func(context.Context) (string, []byte, error) { return "https://kobe.test:8443", kobeCA, nil }
	})
	l, err := withProxy.Create(ctx, p, leaseservice.CreateRequest{Pool: "proxied"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(l.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	if want := "https://kobe.test:8443/connect/" + l.Object.Name; cluster.Server != want || string(cluster.CertificateAuthorityData) != string(kobeCA) {
		t.Fatalf("kubeconfig server %q with CA %q, want %q with kobe's CA", cluster.Server, cluster.CertificateAuthorityData, want)
	}
	waitRecorded(t, l.Object.Name)
	if _, err := noProxy.Get(ctx, p, l.Object.Name); !errors.Is(err, leaseservice.ErrProxyNotConfigured) {
		t.Fatalf("Get of a Proxy-mode lease without a connect proxy: %v, want ErrProxyNotConfigured", err)
	}
	if err := withProxy.Release(ctx, p, l.Object.Name); err != nil {
		t.Fatal(err)
	}
}
