//go:build integration

package apiserver_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
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

// TestConnectURLChecked: a --connect-url that kubeconfigs could not use
// stops the server at start, with what to fix, instead of failing every
// Proxy-mode lease later.
func TestConnectURLChecked(t *testing.T) {
	ca, err := pki.NewCA("connect-url-test", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssueServing("kobe", []string{"localhost"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, certFile, cert)
	writeFile(t, keyFile, key)
	for _, tt := range []struct {
		name, url, certFile, keyFile, want string
	}{
		{"plain http", "http://kobe.example.com", certFile, keyFile, "must be https"},
		{"with a query", "https://kobe.example.com/?a=b", certFile, keyFile, "must be https"},
		{"without TLS", "https://kobe.example.com", "", "", "needs the API served over TLS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := newServer(fx.mgr, apiserver.Options{Addr: "127.0.0.1:0", TLSCertFile: tt.certFile, TLSKeyFile: tt.keyFile, ConnectURL: tt.url})
			if err != nil {
				t.Fatal(err)
			}
			err = srv.Start(t.Context())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start: %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
