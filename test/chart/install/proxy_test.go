//go:build root

package install

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// createDefaultPool creates the pool defaultPool of one member that names
// no backend type and no access mode, only that the member images are not
// pulled (they were imported), and checks that the API server defaulted it
// to the kubernetes backend with the access mode left to the backend's
// default (Proxy). It returns when it was created.
func createDefaultPool(t *testing.T, c client.Client) time.Time {
	t.Helper()
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: defaultPool, Namespace: namespace},
		Spec: kobev1.ClusterPoolSpec{
			Size: ptr.To[int32](1),
			TTL:  &metav1.Duration{Duration: 30 * time.Minute},
			Backend: kobev1.BackendSpec{Kubernetes: &kobev1.KubernetesBackendSpec{
				Images: &kobev1.KubernetesImages{PullPolicy: corev1.PullNever},
			}},
		},
	}
	if p.Spec.Backend.Type != "" || p.Spec.Access != nil {
		t.Fatal("the default pool names a backend type or an access mode")
	}
	created := time.Now()
	if err := c.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pool %s: %v", defaultPool, err)
	}
	if p.Spec.Backend.Type != kobev1.BackendKubernetes || p.Spec.Access != nil {
		t.Fatalf("pool %s stored with backend %q and access %+v, want kubernetes (the CRD default) and none", defaultPool, p.Spec.Backend.Type, p.Spec.Access)
	}
	return created
}

// waitPoolReady waits until pool is Ready with n Ready members.
func waitPoolReady(t *testing.T, c client.Client, pool string, n int32, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, "pool "+pool+" Ready", func() error {
		var p kobev1.ClusterPool
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: pool}, &p); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(p.Status.Conditions, kobev1.ConditionReady) || p.Status.Ready < n {
			return fmt.Errorf("pool %s: phase %s, %d Ready, conditions %v", pool, p.Status.Phase, p.Status.Ready, p.Status.Conditions)
		}
		return nil
	})
}

// proxiedLease takes a lease of defaultPool with `kobe lease`, checks that
// its member is in Proxy access and that the kubeconfig points at kobe's
// /connect/<lease> (at the endpoint the CLI used) trusting the chart's CA,
// and that kubectl get ns works with it. It returns the lease and the
// kubeconfig's path, and logs how long each took.
func proxiedLease(t *testing.T, k *cli, ca []byte) (wire.Lease, string) {
	t.Helper()
	kc := filepath.Join(k.dir, "default.kubeconfig")
	var l wire.Lease
	start := time.Now()
	k.json(&l, "lease", defaultPool, "--ttl", "10m", "--kubeconfig", kc)
	t.Logf("%-40s %v", "kobe lease default (round trip)", time.Since(start).Round(time.Millisecond))
	if l.Phase != wire.PhaseBound || l.ClusterName == "" {
		t.Fatalf("kobe lease %s: phase %q on %q, want Bound on a member", defaultPool, l.Phase, l.ClusterName)
	}
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatalf("the lease's kubeconfig: %v", err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.Clusters[kctx.Cluster] == nil {
		t.Fatalf("the lease's kubeconfig has no current context's cluster: %+v", cfg)
	}
	cluster := cfg.Clusters[kctx.Cluster]
	if want := k.endpoint + "/connect/" + l.ID; cluster.Server != want {
		t.Fatalf("the lease's kubeconfig points at %s, want kobe's connect proxy %s", cluster.Server, want)
	}
	if !bytes.Equal(bytes.TrimSpace(cluster.CertificateAuthorityData), bytes.TrimSpace(ca)) {
		t.Errorf("the lease's kubeconfig trusts %q, want the chart's CA", cluster.CertificateAuthorityData)
	}
	start = time.Now()
	if err := kubectlGetNS(t, kc); err != nil {
		t.Fatal(err)
	}
	t.Logf("%-40s %v", "kubectl get ns through the proxy", time.Since(start).Round(time.Millisecond))
	return l, kc
}

// kubectlGetNS runs kubectl get ns with kubeconfig and fails unless it
// lists the member's default and kube-system namespaces.
func kubectlGetNS(t *testing.T, kubeconfig string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, testenv.KubectlPath(t), "--kubeconfig", kubeconfig, "--request-timeout", "10s", "get", "ns", "-o", "name").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl get ns: %w\n%s", err, out)
	}
	for _, ns := range []string{"namespace/default", "namespace/kube-system"} {
		if !strings.Contains(string(out), ns) {
			return fmt.Errorf("kubectl get ns printed %q, without %s", out, ns)
		}
	}
	return nil
}

// releaseProxied releases the lease id of member with `kobe release`, and
// waits until no pod of the member is left; then the lease's kubeconfig
// (kc) is refused.
func releaseProxied(t *testing.T, c client.Client, k *cli, id, member, kc string) {
	t.Helper()
	var m kobev1.ClusterInstance
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: member}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.Access == nil || m.Spec.Access.Mode != kobev1.AccessProxy {
		t.Errorf("member %s access %+v, want Proxy (the kubernetes backend's default)", member, m.Spec.Access)
	}
	sel := client.MatchingLabels{kobev1.LabelMemberUID: string(m.UID)}
	var pods corev1.PodList
	if err := c.List(t.Context(), &pods, client.InNamespace(namespace), sel); err != nil || len(pods.Items) == 0 {
		t.Fatalf("member %s: %d pods (%v), want its control plane's", member, len(pods.Items), err)
	}
	start := time.Now()
	k.run("release", id)
	testenv.Eventually(t, 2*time.Minute, "member "+member+"'s pods gone", func() error {
		if err := c.List(t.Context(), &pods, client.InNamespace(namespace), sel); err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d pods of %s left", n, member)
		}
		return nil
	})
	t.Logf("%-40s %v", "release -> member's pods gone", time.Since(start).Round(time.Millisecond))
	if err := kubectlGetNS(t, kc); err == nil {
		t.Error("kubectl get ns with the released lease's kubeconfig works")
	} else {
		t.Logf("the released lease's kubeconfig is refused: %v", err)
	}
}

// secretData is the data of the Secret name.
func secretData(t *testing.T, c client.Client, name string) map[string][]byte {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// checkCertAfterUpgrade: the upgrade that added a certificate name kept
// the CA callers hold (Helm's lookup of the Secret) and signed a new
// serving certificate with it, valid for the new name and the old ones.
func checkCertAfterUpgrade(t *testing.T, c client.Client, ca, servingBefore []byte) {
	t.Helper()
	data := secretData(t, c, tlsSecret)
	if !bytes.Equal(data["ca.crt"], ca) {
		t.Fatal("helm upgrade replaced the chart's CA: callers' copies and bound leases' kubeconfigs no longer verify")
	}
	if bytes.Equal(data["tls.crt"], servingBefore) {
		t.Error("helm upgrade with a new name kept the serving certificate")
	}
	block, _ := pem.Decode(data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	var errs []error
	for _, name := range []string{"kobe.example.test", "kobe.kobe-system.svc", "localhost", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("the serving certificate after the upgrade: %v", err)
	}
}

// checkMemberAdmitsOperator: the NetworkPolicy of member (a Proxy member,
// so no rule admits everyone) lets the operator's pods (their labels as
// scheduled) reach the member's API: the selector the chart passes
// (--member-network-policy-operator-selector) matches them. The host
// cluster's CNI does not enforce NetworkPolicies, so this reads the policy.
func checkMemberAdmitsOperator(t *testing.T, c client.Client, member string, operatorPods []string) {
	t.Helper()
	var m kobev1.ClusterInstance
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: member}, &m); err != nil {
		t.Fatal(err)
	}
	var nps networkingv1.NetworkPolicyList
	if err := c.List(t.Context(), &nps, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelMemberUID: string(m.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(nps.Items) != 1 {
		t.Fatalf("member %s has %d NetworkPolicies, want 1", member, len(nps.Items))
	}
	np := nps.Items[0]
	for _, name := range operatorPods {
		var pod corev1.Pod
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, &pod); err != nil {
			t.Fatal(err)
		}
		admitted := false
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				t.Errorf("NetworkPolicy %s admits everyone (%+v) to a Proxy member", np.Name, rule)
			}
			for _, from := range rule.From {
				if from.PodSelector == nil || from.NamespaceSelector != nil || len(from.PodSelector.MatchLabels) == 0 {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(from.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Matches(labels.Set(pod.Labels)) && len(rule.Ports) > 0 {
					admitted = true
				}
			}
		}
		if !admitted {
			t.Errorf("NetworkPolicy %s admits no rule's pods to the API port that match operator pod %s (labels %v): %+v", np.Name, name, pod.Labels, np.Spec.Ingress)
		}
	}
}

// checkNotForbidden fails the test if a log of pods says "forbidden": the
// operator, running under the chart's RBAC, was refused something.
func checkNotForbidden(t *testing.T, cs kubernetes.Interface, pods []string) {
	t.Helper()
	for _, p := range pods {
		logs, err := cs.CoreV1().Pods(namespace).GetLogs(p, &corev1.PodLogOptions{}).DoRaw(t.Context())
		if err != nil {
			t.Fatalf("logs of %s: %v", p, err)
		}
		for l := range strings.SplitSeq(string(logs), "\n") {
			if strings.Contains(strings.ToLower(l), "forbidden") {
				t.Errorf("pod %s was refused with the chart's RBAC: %s", p, l)
			}
		}
	}
}
