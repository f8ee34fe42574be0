package apiserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestProxyPoolNeedsTLS: this server serves its API without TLS, so a pool
// whose members are reached through the connect proxy is refused with a
// JSON error that says what to configure, and nothing is written: the
// lease is never handed out as Direct instead.
func TestProxyPoolNeedsTLS(t *testing.T) {
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: "proxied-no-tls", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{
			Size:    ptr.To[int32](0),
			TTL:     &metav1.Duration{Duration: time.Hour},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal},
			Access:  &kobev1.AccessSpec{Mode: kobev1.AccessProxy},
		},
	}
	if err := fx.env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fx.env.Client.Delete(t.Context(), p) })
	eventually(t, "the pool in the cache", func(context.Context) bool {
		return call(t, tokenOf("everything"), http.MethodGet, "/v1/pools/"+p.Name, nil).code == http.StatusOK
	})
	before := leaseObjects(t)
	r := call(t, tokenOf("everything"), http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: p.Name})
	e := requireError(t, r, http.StatusServiceUnavailable, "connect proxy not configured", "--api-tls-cert-file")
	requireReason(t, e, wire.ReasonProxyNotConfigured)
	requireNoNewLease(t, before)
}
