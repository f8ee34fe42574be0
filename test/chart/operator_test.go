package chart

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
)

// TestOperatorRunsWithChartRBAC runs the real kobe-operator with the
// arguments of the default render (listen addresses aside: the test picks
// loopback ports), authenticated as the chart's ServiceAccount with the
// chart's RBAC and nothing more: its caches sync (/readyz), it becomes leader
// (its Lease), and its log holds no "forbidden".
func TestOperatorRunsWithChartRBAC(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}); err != nil {
		t.Fatal(err)
	}
	r := mustRender(t, nil)
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} {
		if err := apply(ctx, env.Client, r.find(t, kind, 1)[0]); err != nil {
			t.Fatalf("applying %s: %v", kind, err)
		}
	}
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	args := slices.DeleteFunc(slices.Clone(operator(t, &d).Args), func(a string) bool {
		return strings.HasPrefix(a, "--api-bind-address") || strings.HasPrefix(a, "--health-probe-bind-address") ||
			strings.HasPrefix(a, "--metrics-bind-address") || a == "--bind-all-interfaces"
	})

	dir := t.TempDir()
	kubeconfig := serviceAccountKubeconfig(ctx, t, env, dir, d.Spec.Template.Spec.ServiceAccountName)
	bin, err := operatorproc.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := operatorproc.Start(operatorproc.Options{Binary: bin, Kubeconfig: kubeconfig, Namespace: testNamespace, Dir: dir, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	if err := p.WaitReady(ctx, 2*time.Minute); err != nil {
		t.Fatalf("operator with the chart's RBAC never Ready: %v", err)
	}
	testenv.Eventually(t, time.Minute, "the operator leads", func() error {
		var l coordinationv1.Lease
		return env.Client.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: "kobe-operator.kobe.kunobi.ninja"}, &l)
	})
	// The janitors and the sweep run on the leader's start; give them a moment.
	time.Sleep(3 * time.Second)
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(strings.ToLower(line), "forbidden") {
			continue
		}
		// The one known refusal: the start-up sweep lists ClusterInstances
		// of every namespace, which the chart does not grant on purpose
		// (chart README, "Not granted"); it is skipped, and only the local
		// backend sweeps. Remove this once the sweep lists its namespace.
		if strings.Contains(line, `"Sweep skipped"`) && strings.Contains(line, "clusterinstances") && strings.Contains(line, "at the cluster scope") {
			t.Logf("known refusal (the sweep's cluster-wide list): %.200s", line)
			continue
		}
		t.Errorf("refused with the chart's RBAC: %s", line)
	}
	t.Logf("operator args from the chart: %q", args)
}

// serviceAccountKubeconfig writes a kubeconfig holding a token of the
// ServiceAccount sa, minted by the API server.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, env *testenv.Env, dir, sa string) string {
	t.Helper()
	acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: sa}}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := env.Client.SubResource("token").Create(ctx, acct, tr); err != nil {
		t.Fatalf("minting a token of %s: %v", sa, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "sa", Namespace: testNamespace}
	cfg.CurrentContext = "sa"
	path := filepath.Join(dir, "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
