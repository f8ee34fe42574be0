//go:build root

package incluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/test/hostile"
)

// egressThroughNodePods checks, with the lease's kubeconfig, the member API
// server's way to its pods through its node pods' egress proxies
// (internal/node, egressproxy.go): a pod (the spoofer of startSpoofer, on
// nodes[0]: testapp answers HTTP with its name) through pods/proxy, several
// times so that both node pods' proxies serve (the host's Service picks
// one at random; the other reaches the pod through the overlay), and
// through services/proxy. Then the hostile suite's forgeries
// (test/hostile APIServerStaysInside: a pod's status IP, an EndpointSlice
// and Endpoints behind a Service, webhooks by Service and URL, a Node's
// InternalIP, an APIService) aim the API server at a listener of the test
// at the host machine's address (where the host cluster's API server
// listens). Each use must fail with the proxy's refusal, and the listener
// must see no connection, while a control connection from the spoofer pod
// to it arrives (node pods reach it, so its silence proves something).
func (f *fixture) egressThroughNodePods(t *testing.T, kc string) {
	began := time.Now()
	// client-go, not kubectl get --raw, which drops the kubeconfig
	// server's path (/connect/<lease>).
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxyGet := func(resource, namespace, name string) (string, error) {
		// A path under proxy/: the member's redirect of .../proxy to
		// .../proxy/ would name a path without /connect/<lease>.
		req := cs.CoreV1().RESTClient().Get().Resource(resource).Name(name).SubResource("proxy").Suffix("egress-test")
		if namespace != "" {
			req = req.Namespace(namespace)
		}
		b, err := req.DoRaw(t.Context())
		return string(b), err
	}
	for i := range 8 {
		out, err := proxyGet("pods", "default", "spoofer:8080")
		if err != nil || strings.TrimSpace(out) != "spoofer" {
			t.Fatalf("pods/proxy to the spoofer pod (request %d): %v: %q", i, err, out)
		}
	}
	web := filepath.Join(f.work, "web.yaml")
	if err := os.WriteFile(web, []byte(webService), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.MustKubectl(t, kc, "label", "pod", "spoofer", "app=web")
	testenv.MustKubectl(t, kc, "apply", "-f", web)
	testenv.Eventually(t, 30*time.Second, "services/proxy to Service web", func() error {
		out, err := proxyGet("services", "default", "web:8080")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "spoofer" {
			return fmt.Errorf("answered %q", out)
		}
		return nil
	})
	t.Logf("pods/proxy (8 times) and services/proxy reached a member pod in %v", time.Since(began).Round(time.Millisecond))

	began = time.Now()
	target := f.hc.NodeIP
	ln, err := net.Listen("tcp4", net.JoinHostPort(target, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			_ = c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dst := net.JoinHostPort(target, port)
	if out, err := testenv.Kubectl(t, kc, "exec", "spoofer", "--", "/testapp", "dial", dst); err != nil {
		t.Fatalf("the control: a member pod connecting to %s: %v %s", dst, err, out)
	}
	testenv.Eventually(t, 5*time.Second, "the control's connection at "+dst, func() error {
		if conns.Load() == 0 {
			return fmt.Errorf("none: the silence of %s would prove nothing", dst)
		}
		return nil
	})

	// The forgeries themselves: a kubernetes member's API server admits
	// them (its admission knows no member addresses) and its egress proxy
	// refuses every dial they cause.
	hostile.APIServerStaysInside(t, hostile.Target{Kubeconfig: kc, Image: "kobe.local/pause:v1", EgressRefusal: "code 403"},
		hostile.Listener{Addr: dst, Conns: func() int64 { return int64(conns.Load()) }})
	t.Logf("the forgeries refused by the egress proxy, no connection at %s, in %v", dst, time.Since(began).Round(time.Millisecond))
}

// webService is a Service of the spoofer pod's HTTP server.
const webService = `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 8080, targetPort: 8080}
`
