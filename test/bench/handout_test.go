// Package bench measures kobe's hand-out latency: request to Bound
// kubeconfig through the real HTTP API, auth, binder and a real API server.
// Members are pre-made Ready ClusterInstances with real access Secrets (the
// member clusters themselves are not needed to bind and mint a kubeconfig),
// so the figures isolate what kobe adds. Run with `make bench`.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiserver"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const ns = "default"

type fixture struct {
	env   *testenv.Env
	cache client.Reader
	url   string
	token string
	next  int
}

func setup(b *testing.B) *fixture {
	b.Helper()
	log.SetLogger(logrDiscard())
	env := testenv.Start(b)
	ctx := b.Context()
	mgr := env.NewManager(b, ns)
	if err := index.Setup(ctx, mgr); err != nil {
		b.Fatal(err)
	}
	f := &fixture{env: env, cache: mgr.GetClient(), token: "bench-token"}
	c := env.Client
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns}, StringData: map[string]string{"token": f.token}},
		&kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns}, Spec: kobev1.AccessPolicySpec{
			Auth:  kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "bench"}}},
			Rules: []kobev1.AccessRule{{Pools: []string{"*"}}},
		}},
		&kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns}, Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](0), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}}},
	} {
		if err := c.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	clk := clock.RealClock{}
	srv := apiserver.New(apiserver.Options{
		Addr: "127.0.0.1:0", Namespace: ns,
		Client: mgr.GetClient(), Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Binder:   &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk},
		Auth:     auth.NewAuthenticator(auth.Options{Reader: mgr.GetClient(), Namespace: ns}),
		Recorder: mgr.GetEventRecorder("bench"), Clock: clk, Log: logrDiscard(),
	})
	if err := mgr.Add(srv); err != nil {
		b.Fatal(err)
	}
	testenv.StartManager(b, mgr)
	testenv.Eventually(b, 30*time.Second, "the API server to listen", func() error {
		if srv.Addr() == "" {
			return errors.New("no address yet")
		}
		return nil
	})
	f.url = "http://" + srv.Addr()
	return f
}

// addMembers creates n Ready members of pool "bench" with access Secrets.
func (f *fixture) addMembers(b *testing.B, n int) {
	b.Helper()
	ctx := context.Background()
	serverCA, _ := pki.NewCA("bench-server-ca", time.Hour)
	clientCA, _ := pki.NewCA("bench-client-ca", time.Hour)
	access := &backend.Access{Endpoint: "https://127.0.0.1:6443", CACert: serverCA.CertPEM, ClientCACert: clientCA.CertPEM, ClientCAKey: clientCA.KeyPEM, AdminKubeconfig: []byte("unused")}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			inst := &kobev1.ClusterInstance{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-bench-%d", i), Namespace: ns, Labels: map[string]string{kobev1.LabelPool: "bench"}},
				Spec:       kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "bench"}, Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
			}
			if err := f.env.Client.Create(ctx, inst); err != nil {
				b.Error(err)
				return
			}
			if err := f.env.Client.Create(ctx, memberaccess.Secret(inst, access)); err != nil {
				b.Error(err)
				return
			}
			inst.Status.Phase = kobev1.InstanceReady
			if err := f.env.Client.Status().Update(ctx, inst); err != nil {
				b.Error(err)
			}
		}(f.next + i)
	}
	wg.Wait()
	f.next += n
	// Measure only once the cache (which the binder reads) has every member
	// Ready.
	testenv.Eventually(b, 30*time.Second, "the cache to see the new members Ready", func() error {
		var l kobev1.ClusterInstanceList
		if err := f.cache.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{kobev1.LabelPool: "bench"}); err != nil {
			return err
		}
		ready := 0
		for _, m := range l.Items {
			if m.Status.Phase == kobev1.InstanceReady && m.Spec.LeaseRef == nil {
				ready++
			}
		}
		if ready < n {
			return fmt.Errorf("%d of %d new members Ready and free in the cache", ready, n)
		}
		return nil
	})
}

func (f *fixture) lease(client *http.Client) (time.Duration, error) {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/leases", bytes.NewReader([]byte(`{"pool":"bench","ttl":"10m"}`)))
	req.Header.Set("Authorization", "Bearer "+f.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusCreated {
		return took, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	var l wire.Lease
	if err := json.Unmarshal(body, &l); err != nil || l.Kubeconfig == "" || l.Phase != "Bound" {
		return took, fmt.Errorf("not a bound lease with a kubeconfig: %s", body)
	}
	return took, nil
}

// BenchmarkHandout measures request -> Bound kubeconfig, one caller at a
// time and with 16 concurrent callers, and reports p50/p95/p99 in ms.
func BenchmarkHandout(b *testing.B) {
	f := setup(b)
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			perCaller := b.N
			if perCaller > 40 {
				perCaller = 40
			}
			total := perCaller * callers
			f.addMembers(b, total)
			httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
			lat := make([]time.Duration, 0, total)
			var mu sync.Mutex
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < perCaller; i++ {
						d, err := f.lease(httpc)
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			pct := func(p float64) float64 {
				if len(lat) == 0 {
					return 0
				}
				return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "leases/s")
			fmt.Fprintf(os.Stderr, "handout callers=%d n=%d p50=%.1fms p95=%.1fms p99=%.1fms rate=%.0f/s\n", callers, len(lat), pct(0.5), pct(0.95), pct(0.99), float64(len(lat))/elapsed.Seconds())
		})
	}
}
