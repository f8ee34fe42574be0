//go:build root

package localnodes

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/credentials/pki"
	"github.com/kunobi-ninja/kobe/internal/node"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/memberproc"
	"github.com/kunobi-ninja/kobe/test/outside"
)

// hookManifest is an admission webhook served by a member pod (testapp
// with args: `webhook CERT KEY` refuses objects named deny-*) behind the
// Service ns/name, for the ConfigMaps of namespace ns: what cert-manager's
// or an ingress controller's chart installs.
func hookManifest(ns, name string, args []string, certPEM, keyPEM, caPEM []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + ns + `}
---
apiVersion: v1
kind: Secret
metadata: {name: ` + name + `-tls, namespace: ` + ns + `}
type: kubernetes.io/tls
data:
  tls.crt: ` + b64(certPEM) + `
  tls.key: ` + b64(keyPEM) + `
---
apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, namespace: ` + ns + `, labels: {app: ` + name + `}}
spec:
  containers:
  - name: ` + name + `
    image: ` + testappImage + `
    imagePullPolicy: Never
    args: [` + strings.Join(quoted, ", ") + `]
    ports: [{containerPort: 8443}]
    readinessProbe:
      tcpSocket: {port: 8443}
      periodSeconds: 1
    volumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]
  volumes:
  - name: tls
    secret: {secretName: ` + name + `-tls}
---
apiVersion: v1
kind: Service
metadata: {name: ` + name + `, namespace: ` + ns + `}
spec:
  selector: {app: ` + name + `}
  ports: [{port: 443, targetPort: 8443}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: ` + name + `}
webhooks:
- name: ` + name + `.kobe.test
  clientConfig:
    service: {namespace: ` + ns + `, name: ` + name + `}
    caBundle: ` + b64(caPEM) + `
  rules:
  - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: ` + ns + `}
  failurePolicy: Fail
  sideEffects: None
  timeoutSeconds: 5
  admissionReviewVersions: [v1]
`
}

// webhooks: a webhook served by a member pod works (the member's API server
// reaches the pod behind the Service), and one pointed through an
// ExternalName Service at a listener on the host's own address is never
// called (the API server resolves Services through endpoints only).
func webhooks(t *testing.T, w *workload, out *outside.Outside) {
	ca, err := pki.NewCA("kobe-test-webhook", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServing("hook.hooked.svc", []string{"hook.hooked.svc"}, nil, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := testenv.Kubectl(t, w.kubeconfig, "apply", "-f", writeFile(t, hookManifest("hooked", "hook", []string{"webhook", "/tls/tls.crt", "/tls/tls.key"}, certPEM, keyPEM, ca.CertPEM))); err != nil {
		t.Fatalf("applying the webhook: %v\n%s", err, got)
	}
	defer func() {
		_, _ = testenv.Kubectl(t, w.kubeconfig, "delete", "validatingwebhookconfiguration", "hook", "hook-via-externalname", "--ignore-not-found")
		_, _ = testenv.Kubectl(t, w.kubeconfig, "delete", "namespace", "hooked", "hooked-outside", "--wait=false", "--ignore-not-found")
	}()
	if got, err := testenv.Kubectl(t, w.kubeconfig, "-n", "hooked", "wait", "--for=condition=Ready", "pod/hook", "--timeout=30s"); err != nil {
		t.Fatalf("the webhook pod did not become Ready: %v\n%s", err, got)
	}

	t.Run("a webhook served by a member pod is called", func(t *testing.T) {
		i := 0
		testenv.Eventually(t, 20*time.Second, "the member pod's webhook to refuse a deny- ConfigMap", func() error {
			i++
			got, err := testenv.Kubectl(t, w.kubeconfig, "-n", "hooked", "create", "configmap", "deny-"+strconv.Itoa(i))
			if err == nil {
				return fmt.Errorf("admitted: %s", got)
			}
			if !strings.Contains(got, "denied by testapp's webhook") {
				return fmt.Errorf("refused, but not by the webhook: %s", got)
			}
			return nil
		})
		if got, err := testenv.Kubectl(t, w.kubeconfig, "-n", "hooked", "create", "configmap", "fine"); err != nil {
			t.Errorf("the webhook refused what it admits: %v %s", err, got)
		}
	})

	t.Run("a webhook through an ExternalName Service reaches nothing", func(t *testing.T) {
		host, port, _ := strings.Cut(out.Host, ":")
		before := out.HostConns.Load()
		manifest := `apiVersion: v1
kind: Namespace
metadata: {name: hooked-outside}
---
apiVersion: v1
kind: Service
metadata: {name: outside, namespace: hooked-outside}
spec: {type: ExternalName, externalName: "` + host + `"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: hook-via-externalname}
webhooks:
- name: outside.kobe.test
  clientConfig:
    service: {namespace: hooked-outside, name: outside, port: ` + port + `}
  rules:
  - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: hooked-outside}
  failurePolicy: Fail
  sideEffects: None
  timeoutSeconds: 3
  admissionReviewVersions: [v1]
`
		if got, err := testenv.Kubectl(t, w.kubeconfig, "apply", "-f", writeFile(t, manifest)); err != nil {
			t.Fatalf("an ExternalName Service and a webhook naming it: %v\n%s", err, got)
		}
		i := 0
		testenv.Eventually(t, 20*time.Second, "the webhook's failed call to refuse a ConfigMap", func() error {
			i++
			got, err := testenv.Kubectl(t, w.kubeconfig, "-n", "hooked-outside", "create", "configmap", "probe-"+strconv.Itoa(i))
			if err == nil {
				return fmt.Errorf("admitted (webhook not yet loaded): %s", got)
			}
			if !strings.Contains(got, "outside.kobe.test") {
				return fmt.Errorf("refused, but not by the webhook: %s", got)
			}
			return nil
		})
		if n := out.HostConns.Load() - before; n != 0 {
			t.Errorf("the member's API server connected %d time(s) to %s through an ExternalName Service", n, out.Host)
		}
	})

	t.Run("a webhook that redirects reaches nothing on the host's loopback", func(t *testing.T) {
		redirectedWebhook(t, w, ca)
	})
}

// redirectedWebhook: a webhook served by a member pod answers every call
// with a 307 to a listener on the operator host's loopback (the port of the
// operator's metrics or probes, say). The member's API server follows
// redirects; its control-plane fence (internal/node, cpfence.go) refuses
// the connection, so the listener accepts nothing and the webhook fails.
// Without the fence the listener got the AdmissionReview three times.
func redirectedWebhook(t *testing.T, w *workload, ca *pki.CA) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	var conns atomic.Int64
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
	// Control: the listener answers on this host, and counts what it
	// accepts (once counted, the control is not counted as the attack).
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second); err != nil {
		t.Fatalf("control: the loopback listener does not answer: %v", err)
	} else {
		_ = c.Close()
	}
	testenv.Eventually(t, 5*time.Second, "the listener to count the control's connection", func() error {
		if conns.Load() != 1 {
			return errors.New("not counted yet")
		}
		return nil
	})
	before := conns.Load()
	certPEM, keyPEM, err := ca.IssueServing("redirect.hooked-redirect.svc", []string{"redirect.hooked-redirect.svc"}, nil, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	target := "http://" + ln.Addr().String() + "/steal"
	manifest := hookManifest("hooked-redirect", "redirect", []string{"redirect", "/tls/tls.crt", "/tls/tls.key", target}, certPEM, keyPEM, ca.CertPEM)
	defer func() {
		_, _ = testenv.Kubectl(t, w.kubeconfig, "delete", "validatingwebhookconfiguration", "redirect", "--ignore-not-found")
		_, _ = testenv.Kubectl(t, w.kubeconfig, "delete", "namespace", "hooked-redirect", "--wait=false", "--ignore-not-found")
	}()
	if got, err := testenv.Kubectl(t, w.kubeconfig, "apply", "-f", writeFile(t, manifest)); err != nil {
		t.Fatalf("applying the redirecting webhook: %v\n%s", err, got)
	}
	if got, err := testenv.Kubectl(t, w.kubeconfig, "-n", "hooked-redirect", "wait", "--for=condition=Ready", "pod/redirect", "--timeout=30s"); err != nil {
		t.Fatalf("the redirecting pod did not become Ready: %v\n%s", err, got)
	}
	i := 0
	testenv.Eventually(t, 20*time.Second, "the redirecting webhook's failed call to refuse a ConfigMap", func() error {
		i++
		got, err := testenv.Kubectl(t, w.kubeconfig, "-n", "hooked-redirect", "create", "configmap", "probe-"+strconv.Itoa(i))
		if err == nil {
			return fmt.Errorf("admitted (webhook not yet loaded, or the redirect was served): %s", got)
		}
		if !strings.Contains(got, "redirect.kobe.test") {
			return fmt.Errorf("refused, but not by the webhook: %s", got)
		}
		return nil
	})
	if n := conns.Load() - before; n != 0 {
		t.Errorf("the member's API server followed the webhook's redirect to %s on the host's loopback %d time(s)\n%s", ln.Addr(), n, fenceState(t, w))
	}
}

// fenceState says, for a failure's message, what fences the member's API
// server: its fence table and the cgroups its process is in.
func fenceState(t *testing.T, w *workload) string {
	uid := string(w.member.UID)
	table, err := exec.Command("nft", "list", "table", "inet", node.ControlPlaneTable(uid)).CombinedOutput()
	out := fmt.Sprintf("nft list table (%v):\n%s", err, table)
	if dir, err := memberproc.Dir(s.DataRoot, w.member.UID); err == nil {
		if pids, err := memberproc.Components(dir); err == nil {
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pids["kube-apiserver"]))
			out += fmt.Sprintf("kube-apiserver (pid %d) cgroups:\n%s", pids["kube-apiserver"], cg)
		}
	}
	return out
}
