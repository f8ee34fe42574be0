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
)

// egressThroughNodePods checks, with the lease's kubeconfig, the member API
// server's way to its pods through its node pods' egress proxies
// (internal/node, egressproxy.go): a pod (the spoofer of startSpoofer, on
// nodes[0]: testapp answers HTTP with its name) through pods/proxy, several
// times so that both node pods' proxies serve (the host's Service picks
// one at random; the other reaches the pod through the overlay), and
// through services/proxy. Then the lease holder forges what makes the API
// server connect somewhere: a pod's status IP, an EndpointSlice behind a
// Service, a webhook's Service, a Node's InternalIP, a webhook's URL, each
// naming a listener of the test at the host machine's address (where the
// host cluster's API server listens). Each request must fail with the proxy's refusal, and
// the listener must see no connection, while a control connection from the
// spoofer pod to it arrives (node pods reach it, so its silence proves
// something).
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
	control := conns.Load()

	forged := filepath.Join(f.work, "forged-egress.yaml")
	if err := os.WriteFile(forged, []byte(strings.NewReplacer("TARGET", target, "PORT", port).Replace(forgedEgress)), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.MustKubectl(t, kc, "apply", "-f", forged)
	status := fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}]}}`, target, target)
	testenv.MustKubectl(t, kc, "patch", "pod", "forged", "--subresource=status", "--type=merge", "-p", status)
	if ip := testenv.MustKubectl(t, kc, "get", "pod", "forged", "-o", "jsonpath={.status.podIP}"); ip != target {
		t.Fatalf("the forged pod's IP is %q, want %s (a lease holder may write it)", ip, target)
	}
	refused := func(what, resource, namespace, name string) {
		t.Helper()
		out, err := proxyGet(resource, namespace, name)
		// The API server's Status (the body) carries the proxy's answer.
		if err == nil || !strings.Contains(out, "code 403") {
			t.Errorf("%s: %v: %s (want the egress proxy's refusal, code 403)", what, err, out)
			return
		}
		t.Logf("%s: refused: %s", what, out)
	}
	refused("pods/proxy to a forged pod IP", "pods", "default", "forged:"+port)
	refused("services/proxy to a forged EndpointSlice", "services", "default", "forged:"+port)
	refused("nodes/proxy to a forged InternalIP", "nodes", "", "egress-forged:"+port)
	// A webhook's configuration takes effect within a moment: until it
	// does, a ConfigMap is admitted without it.
	n := 0
	webhookRefused := func(what string) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, what+" refused", func() error {
			n++
			out, err := testenv.Kubectl(t, kc, "create", "configmap", fmt.Sprintf("forged-%d", n))
			if err == nil {
				return fmt.Errorf("admitted (the webhook not active yet?): %s", out)
			}
			if !strings.Contains(out, "code 403") {
				t.Fatalf("%s failed otherwise than by the egress proxy's refusal: %s", what, out)
			}
			t.Logf("%s: refused: %s", what, firstLine(out))
			return nil
		})
	}
	webhookRefused("a webhook through a forged EndpointSlice")
	testenv.MustKubectl(t, kc, "delete", "validatingwebhookconfiguration", "forged")
	// A webhook given by URL: the API server's "controlplane" egress,
	// through the proxies too.
	byURL := filepath.Join(f.work, "forged-url.yaml")
	if err := os.WriteFile(byURL, []byte(strings.NewReplacer("TARGET", target, "PORT", port).Replace(forgedURLWebhook)), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.MustKubectl(t, kc, "apply", "-f", byURL)
	webhookRefused("a webhook by URL")
	testenv.MustKubectl(t, kc, "delete", "validatingwebhookconfiguration", "forged-url")
	time.Sleep(time.Second) // a connection on its way would be in by now
	if got := conns.Load(); got != control {
		t.Errorf("%d connections reached %s from the member's API server (after %d of the control)", got-control, dst, control)
	}
	t.Logf("5 forgeries refused by the egress proxy, no connection at %s, in %v", dst, time.Since(began).Round(time.Millisecond))
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
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

// forgedEgress is what a lease holder writes to aim the member's API server
// at TARGET:PORT: a Node with that InternalIP, a pod bound to it (no kubelet
// ever corrects its status), a Service without selector whose EndpointSlice
// names that address for the pod, and a webhook of ConfigMaps through that
// Service (every ConfigMap of namespace default).
const forgedEgress = `apiVersion: v1
kind: Node
metadata:
  name: egress-forged
status:
  addresses:
  - {type: InternalIP, address: TARGET}
---
apiVersion: v1
kind: Pod
metadata:
  name: forged
  namespace: default
spec:
  nodeName: egress-forged
  containers:
  - name: c
    image: kobe.local/pause:v1
    imagePullPolicy: Never
---
apiVersion: v1
kind: Service
metadata:
  name: forged
  namespace: default
spec:
  ports:
  - {name: p, port: PORT, targetPort: PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: forged-1
  namespace: default
  labels: {kubernetes.io/service-name: forged}
addressType: IPv4
ports:
- {name: p, port: PORT, protocol: TCP}
endpoints:
- addresses: [TARGET]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: default, name: forged}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: forged
webhooks:
- name: forged.kobe.test
  clientConfig:
    service: {namespace: default, name: forged, port: PORT, path: /validate}
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: default}
  objectSelector:
    matchExpressions:
    - {key: never, operator: DoesNotExist}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
  timeoutSeconds: 5
`

// forgedURLWebhook is a webhook of every ConfigMap of namespace default
// given by URL: TARGET:PORT.
const forgedURLWebhook = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: forged-url
webhooks:
- name: forged-url.kobe.test
  clientConfig:
    url: https://TARGET:PORT/validate
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps], scope: Namespaced}
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: default}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
  timeoutSeconds: 5
`
