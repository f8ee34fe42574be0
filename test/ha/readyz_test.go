//go:build heavy

package ha

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// holdingProxy is a plain-HTTP proxy to the test API server that holds
// every read of a namespace's ClusterInstances collection (the cache's
// LIST, or its WATCH with initial events, which client-go informers use
// instead) until released: an API server too slow to let the operator's
// caches sync.
type holdingProxy struct {
	srv     *httptest.Server
	held    atomic.Int32
	release chan struct{}
	once    sync.Once
}

func newHoldingProxy(t *testing.T) *holdingProxy {
	t.Helper()
	target, err := url.Parse(suite.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(suite.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{release: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // watches stream
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/namespaces/") && strings.HasSuffix(r.URL.Path, "/clusterinstances") {
			p.held.Add(1)
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		p.open()
		p.srv.Close()
	})
	return p
}

// open lets held and later LISTs through.
func (p *holdingProxy) open() { p.once.Do(func() { close(p.release) }) }

// kubeconfig writes a kubeconfig that reaches the API server through the
// proxy, which adds the credentials.
func (p *holdingProxy) kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.srv.URL}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadyzBeforeCacheSync: while the API server holds the LIST the
// operator's member cache needs, the probe port's /readyz answers 503 at
// once (each probe bounded by 5 s: a probe that hangs fails the test),
// /healthz answers 200, and the lease API is not ready; once the list goes
// through, /readyz answers 200 on both ports.
func TestReadyzBeforeCacheSync(t *testing.T) {
	proxy := newHoldingProxy(t)
	ns := suite.env.NewNamespace(t)
	op, err := operatorproc.Start(operatorproc.Options{
		Binary: suite.binary, Kubeconfig: proxy.kubeconfig(t), Namespace: ns, Dir: t.TempDir(),
		Args: []string{"--enable-sim-backend", "--disable-local-backend"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := op.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("operator log tail:\n%s", op.Tail(6000))
		}
	})
	ctx := t.Context()
	readyz := op.ProbeURL + "/readyz"
	testenv.Eventually(t, 60*time.Second, "the probe port to answer /readyz while the member list is held", func() error {
		if err := op.Alive(); err != nil {
			t.Fatal(err)
		}
		code, err := op.GetStatus(ctx, readyz)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz answered %d before the caches could sync, want 503", code)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "the operator's member list to reach the proxy", func() error {
		if proxy.held.Load() == 0 {
			return errNotYet
		}
		return nil
	})
	// Held, the probes keep answering at once.
	for range 3 {
		start := time.Now()
		code, err := op.GetStatus(ctx, readyz)
		if err != nil {
			t.Fatalf("/readyz with the member list held: %v", err)
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz answered %d with the member list held, want 503", code)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("/readyz took %s to answer", took)
		}
		if code, err := op.GetStatus(ctx, op.ProbeURL+"/healthz"); err != nil || code != http.StatusOK {
			t.Fatalf("/healthz with the member list held: %d, %v", code, err)
		}
		if code, err := op.GetStatus(ctx, op.APIURL+"/readyz"); err == nil && code == http.StatusOK {
			t.Fatalf("the lease API says ready with the member list held")
		}
		time.Sleep(300 * time.Millisecond) // spaced probes, as a kubelet sends them
	}

	proxy.open()
	for _, url := range []string{readyz, op.APIURL + "/readyz"} {
		testenv.Eventually(t, 60*time.Second, url+" to answer 200 once the list goes through", func() error {
			if err := op.Alive(); err != nil {
				t.Fatal(err)
			}
			code, err := op.GetStatus(ctx, url)
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return errStatus(code)
			}
			return nil
		})
	}
}
