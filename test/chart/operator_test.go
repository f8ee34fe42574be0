//go:build integration

package chart

import (
	"context"
	"errors"
	"fmt"
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

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/auditrecord"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/operatorproc"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestOperatorRunsWithChartRBAC runs the real kobe-operator with the
// arguments of the default render with the sim backend enabled (listen
// addresses aside: the test picks loopback ports), authenticated as the
// chart's ServiceAccount with the chart's RBAC and nothing more: its caches
// sync (/readyz), it becomes leader (its Lease), its start-up sweep lists
// its namespace, a sim pool fills and a lease taken and released through the
// API runs every path of a hand-out (ledger, member access key, audit record,
// Events), and its log holds no "forbidden": a refused list, watch or write
// of any informer or request shows there.
func TestOperatorRunsWithChartRBAC(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}); err != nil {
		t.Fatal(err)
	}
	// The sim backend needs no rights of its own: its members are objects
	// like any other backend's, without a cluster behind them.
	r := mustRender(t, map[string]any{"backends": map[string]any{"sim": map[string]any{"enabled": true}}})
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} {
		if err := apply(ctx, env.Client, r.find(t, kind, 1)[0]); err != nil {
			t.Fatalf("applying %s: %v", kind, err)
		}
	}
	var d appsv1.Deployment
	r.typed(t, "Deployment", &d)
	args := slices.DeleteFunc(slices.Clone(operator(t, &d).Args), func(a string) bool {
		return strings.HasPrefix(a, "--api-bind-address") || strings.HasPrefix(a, "--health-probe-bind-address") ||
			strings.HasPrefix(a, "--metrics-bind-address") || a == "--bind-all-interfaces" ||
			// The certificate files are the pod's (the Secret's volume), and
			// serving TLS takes no rights: test/chart/install runs it in a pod.
			strings.HasPrefix(a, "--api-tls-")
	})
	if !slices.Contains(args, "--enable-sim-backend") {
		t.Fatalf("the render with backends.sim.enabled has no --enable-sim-backend: %q", args)
	}

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
	testenv.Eventually(t, 30*time.Second, "the start-up sweep to run", func() error {
		if !p.LogContains(`"Start-up sweep done"`) && !p.LogContains(`"Sweep skipped"`) {
			return errors.New("neither \"Start-up sweep done\" nor \"Sweep skipped\" in the log")
		}
		return nil
	})
	if p.LogContains(`"Sweep skipped"`) {
		t.Error("the start-up sweep was skipped")
	} else {
		leaseRoundTrip(t, env, p)
	}

	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("refused with the chart's RBAC: %s", line)
		}
	}
	t.Logf("operator args from the chart: %q", args)
}

// leaseRoundTrip creates, as an administrator would, a token AccessPolicy
// and a sim pool of one member, then takes a lease through the operator's
// API and releases it: the member is handed out (ledger ConfigMap, access
// Secret read, lease status, Events), its lease ends (audit record
// ConfigMap) and it is recycled, all under the operator's identity.
func leaseRoundTrip(t *testing.T, env *testenv.Env, p *operatorproc.Process) {
	t.Helper()
	ctx := t.Context()
	const token = "chart-rbac-token"
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rbac-token", Namespace: testNamespace}, StringData: map[string]string{"token": token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "rbac", Namespace: testNamespace},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "rbac-token"}}},
				Identity: "chart-rbac",
				Rules:    []kobev1.AccessRule{{Pools: []string{"*"}}},
			},
		},
		&kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: "sim", Namespace: testNamespace},
			Spec: kobev1.ClusterPoolSpec{
				Size: ptr.To[int32](1),
				Backend: kobev1.BackendSpec{Type: kobev1.BackendSim,
					Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: 500 * time.Millisecond}}},
			},
		},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
	api, err := apiclient.New(p.APIURL, apiclient.BearerToken(token))
	if err != nil {
		t.Fatal(err)
	}
	var l *wire.Lease
	testenv.Eventually(t, 30*time.Second, "a lease of the sim pool to be Bound", func() error {
		if l == nil {
			if l, err = api.CreateLease(ctx, wire.CreateLeaseRequest{Pool: "sim", TTL: "10m"}); err != nil {
				return err
			}
		} else if l, err = api.GetLease(ctx, l.ID); err != nil {
			return err
		}
		if l.Phase != wire.PhaseBound || l.Kubeconfig == "" {
			return fmt.Errorf("lease %s is %s", l.ID, l.Phase)
		}
		return nil
	})
	if err := api.ReleaseLease(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the lease's audit record and a fresh member", func() error {
		var audits corev1.ConfigMapList
		if err := env.Client.List(ctx, &audits, client.InNamespace(testNamespace), client.MatchingLabels{auditrecord.Label: auditrecord.LabelValue}); err != nil {
			return err
		}
		if len(audits.Items) != 1 {
			return fmt.Errorf("%d audit records", len(audits.Items))
		}
		var members kobev1.ClusterInstanceList
		if err := env.Client.List(ctx, &members, client.InNamespace(testNamespace)); err != nil {
			return err
		}
		for _, m := range members.Items {
			if m.Name != l.ClusterName && m.Status.Phase == kobev1.InstanceReady {
				return nil
			}
		}
		return fmt.Errorf("no Ready member but the released %s yet", l.ClusterName)
	})
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
