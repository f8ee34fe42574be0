//go:build root

package install

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auditrecord"
	"github.com/kunobi-ninja/kobe/internal/leaseservice"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

const (
	namespace   = "kobe-system"
	release     = "kobe"
	pool        = "sim"
	leaderLease = "kobe-operator.kobe.kunobi.ninja"
	// tlsSecret is the chart's self-signed certificate: <fullname>-api-tls.
	tlsSecret = "kobe-api-tls"
	// defaultPool names no backend: the CRD's default, kubernetes, applies.
	defaultPool = "default"
)

// Inputs are the images and the CLI that `make test-chart-install` builds
// and passes in the environment.
type Inputs struct {
	PauseTar, PauseImage, OperatorTar, Repository, Tag, CLI string
	// ControlPlaneTars are the images of the kubernetes backend's member
	// pods (make image-controlplane, in CONTROLPLANE_IMAGE_DIR).
	ControlPlaneTars []string
}

// inputs reads them, failing the test when one is missing.
func inputs(t *testing.T) Inputs {
	t.Helper()
	root := testenv.RepoRoot()
	or := func(key, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return def
	}
	in := Inputs{
		PauseTar:    or("HOSTCLUSTER_PAUSE_TAR", filepath.Join(root, "bin", "images", "pause.tar")),
		PauseImage:  or("HOSTCLUSTER_PAUSE_IMAGE", "kobe.local/pause:v1"),
		OperatorTar: or("KOBE_OPERATOR_TAR", filepath.Join(root, "bin", "images", "kobe-operator.tar")),
		Repository:  os.Getenv("KOBE_IMAGE_REPOSITORY"),
		Tag:         os.Getenv("KOBE_IMAGE_TAG"),
		CLI:         or("KOBE_CLI", filepath.Join(root, "bin", "kobe")),
	}
	dir := or("CONTROLPLANE_IMAGE_DIR", filepath.Join(root, "bin", "images"))
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		in.ControlPlaneTars = append(in.ControlPlaneTars, filepath.Join(dir, name+".tar"))
	}
	if in.Repository == "" || in.Tag == "" {
		t.Fatal("KOBE_IMAGE_REPOSITORY and KOBE_IMAGE_TAG name the image in KOBE_OPERATOR_TAR: run `make test-chart-install`")
	}
	for _, f := range append([]string{in.PauseTar, in.OperatorTar, in.CLI}, in.ControlPlaneTars...) {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run `make test-chart-install` (it builds the images and the CLI)", f)
		}
	}
	return in
}

// TestInstallUpgradeUninstall is the chart end to end on a real node:
// helm install with the chart's defaults (the API on TLS with the chart's
// self-signed certificate) of the image `make image` built, both replicas
// Ready and one leader; an AccessPolicy, a sim pool and a pool that names
// no backend (so the kubernetes backend, Proxy access: the fresh
// install); `kobe lease` through the chart's Service, trusting the CA of the
// chart's Secret, binds a lease of each, and the default pool's kubeconfig
// reaches its member through kobe's /connect/<lease>; helm upgrade (with a
// new certificate name) rolls every pod, keeps the CA, and both leases stay
// Bound, the proxied one still answering kubectl through the new pods; the
// proxied lease's release removes its member's pods; the sim lease is
// extended and released through the new pods; after the README's
// uninstall steps nothing of the release is left but what the README says
// stays; and the machine is as it was.
func TestInstallUpgradeUninstall(t *testing.T) {
	in := inputs(t)
	ctx := t.Context()
	if err := hostcluster.Teardown(ctx, hostcluster.DefaultDir); err != nil {
		t.Fatalf("teardown before the test: %v", err)
	}
	before, err := hostcluster.TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := time.Now()
	lap := func(what string) {
		t.Logf("%-40s %v", what, time.Since(step).Round(time.Millisecond))
		step = time.Now()
	}

	hc, err := hostcluster.New(ctx, hostcluster.Options{PauseImage: in.PauseImage,
		Images: append([]string{in.PauseTar, in.OperatorTar}, in.ControlPlaneTars...)})
	if err != nil {
		t.Fatalf("starting host cluster: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = hc.Stop(context.Background())
		}
	})
	lap("host cluster up (images imported)")
	c, err := NewClient(hc.Config)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHelm(hc.Kubeconfig, namespace, release)
	if err != nil {
		t.Fatal(err)
	}

	if err := CheckImported(ctx, hc.Containerd, in.Repository+":"+in.Tag); err != nil {
		t.Fatal(err)
	}
	vals := Values(in.Repository, in.Tag)
	if err := h.Install(ctx, vals); err != nil {
		t.Fatal(err)
	}
	lap("helm install --wait")
	image := in.Repository + ":" + in.Tag
	first := readyPods(t, c, image, nil)
	leader := checkLeader(t, c, hc.Client, first)
	lap("both replicas Ready, one leader")
	t.Logf("pods %v, leader %s", first, leader)

	// The caller's copy of the CA, as NOTES.txt tells to take it.
	ca, err := CA(ctx, hc.Client, namespace, tlsSecret)
	if err != nil {
		t.Fatal(err)
	}
	servingBefore := secretData(t, c, tlsSecret)["tls.crt"]
	token := fmt.Sprintf("chart-e2e-%d", time.Now().UnixNano())
	if err := Demo(ctx, c, namespace, pool, token); err != nil {
		t.Fatal(err)
	}
	defaultCreated := createDefaultPool(t, c)
	if err := WaitDemoReady(ctx, c, namespace, pool, time.Minute); err != nil {
		t.Fatal(err)
	}
	lap("AccessPolicy and sim pool Ready")

	addr, err := Forward(ctx, hc.Client, namespace, release, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "kobe-ca.crt")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	cli := &cli{t: t, bin: in.CLI, dir: dir, endpoint: "https://" + addr, token: token, caFile: caFile}
	if err := WaitAPI(ctx, cli.endpoint, ca, time.Minute); err != nil {
		t.Fatal(err)
	}
	lap("the API answers through the Service (TLS)")
	var leased wire.Lease
	cli.json(&leased, "lease", pool, "--ttl", "10m", "--kubeconfig", filepath.Join(cli.dir, "lease.kubeconfig"))
	if leased.Phase != wire.PhaseBound || leased.ClusterName == "" {
		t.Fatalf("kobe lease: phase %q on %q, want Bound on a member", leased.Phase, leased.ClusterName)
	}
	member := boundLease(t, c, leased.ID, "")
	lap("kobe lease through the Service: Bound")

	waitPoolReady(t, c, defaultPool, 1, 4*time.Minute)
	t.Logf("%-40s %v", "default pool's member Ready after", time.Since(defaultCreated).Round(time.Millisecond))
	lap("default (kubernetes) pool Ready")
	proxied, proxiedKC := proxiedLease(t, cli, ca)
	proxiedMember := boundLease(t, c, proxied.ID, "")
	checkMemberAdmitsOperator(t, c, proxiedMember, first)
	checkNotForbidden(t, hc.Client, first)
	lap("kobe lease default + kubectl get ns (proxy)")

	// A changed value, a pod annotation and one more certificate name:
	// every pod is replaced, and the serving certificate signed again by
	// the same CA.
	vals["limits"] = map[string]any{"maxQueuedPerOwner": 5}
	vals["podAnnotations"] = map[string]any{"kobe.kunobi.ninja/chart-test": "upgraded"}
	vals["api"] = map[string]any{"tls": map[string]any{"selfSigned": map[string]any{"extraDnsNames": []any{"kobe.example.test"}}}}
	if err := h.Upgrade(ctx, vals); err != nil {
		t.Fatal(err)
	}
	lap("helm upgrade --wait (rollout)")
	checkCertAfterUpgrade(t, c, ca, servingBefore)
	second := readyPods(t, c, image, first)
	for _, p := range second {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: p}, &pod); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pod.Spec.Containers[0].Args, "--max-queued-per-owner=5") {
			t.Errorf("pod %s args %q: the upgrade's value is missing", p, pod.Spec.Containers[0].Args)
		}
	}
	checkLeader(t, c, hc.Client, second)
	lap("new replicas Ready, one leader among them")

	// The proxied lease's kubeconfig, minted before the upgrade, reaches its
	// member through the new pods with the CA it holds.
	boundLease(t, c, proxied.ID, proxiedMember)
	testenv.Eventually(t, time.Minute, "kubectl get ns through the new pods", func() error {
		return kubectlGetNS(t, proxiedKC)
	})
	lap("the proxied lease answers after the upgrade")
	releaseProxied(t, c, cli, proxied.ID, proxiedMember, proxiedKC)
	checkNotForbidden(t, hc.Client, second)
	lap("proxied lease released, its member's pods gone")

	boundLease(t, c, leased.ID, member)
	var mine []wire.Lease
	cli.json(&mine, "leases")
	if len(mine) != 1 || mine[0].ID != leased.ID || mine[0].Phase != wire.PhaseBound {
		t.Fatalf("kobe leases after the upgrade: %+v, want %s Bound", mine, leased.ID)
	}
	var l kobev1.ClusterLease
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leased.ID}, &l); err != nil {
		t.Fatal(err)
	}
	expires := l.Status.ExpiresAt.Time
	cli.run("extend", leased.ID, "--ttl", "20m")
	testenv.Eventually(t, 10*time.Second, "the extension in the lease's status", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leased.ID}, &l); err != nil {
			return err
		}
		if l.Status.ExpiresAt == nil || !l.Status.ExpiresAt.After(expires) {
			return fmt.Errorf("expires %v, was %v", l.Status.ExpiresAt, expires)
		}
		return nil
	})
	cli.run("release", leased.ID)
	testenv.Eventually(t, 30*time.Second, "the lease Released", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leased.ID}, &l); err != nil {
			return err
		}
		if l.Status.Phase != kobev1.LeaseReleased {
			return fmt.Errorf("phase %s", l.Status.Phase)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "the released leases' audit records", func() error {
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.InNamespace(namespace), client.MatchingLabels{auditrecord.Label: auditrecord.LabelValue}); err != nil {
			return err
		}
		if len(cms.Items) != 2 {
			return fmt.Errorf("%d audit records", len(cms.Items))
		}
		return nil
	})
	lap("lease survived: listed, extended, released")

	// The chart README's uninstall: its kubectl lines (leases, pools and
	// members, while the operator runs), then helm uninstall.
	for _, args := range readmeUninstall(t) {
		kubectl := exec.CommandContext(ctx, "kubectl", args...)
		kubectl.Env = append(os.Environ(), "KUBECONFIG="+hc.Kubeconfig)
		if out, err := kubectl.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	lap("leases, pools and members deleted (kubectl)")
	if err := h.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	lap("helm uninstall --wait")
	checkUninstalled(t, c, hc)
	lap("nothing of the release left")

	stopped = true
	if err := hc.Stop(ctx); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	lap("host cluster torn down")
	after, err := hostcluster.TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := before.Diff(after); d != "" {
		t.Errorf("the machine differs after teardown (- before only, + after only):\n%s", d)
	}
}

// readyPods waits for exactly the Deployment's two replicas, Ready, of
// image with imagePullPolicy Never, none of them named in old, and no other
// pod of the release (old ones terminated), and returns their names.
func readyPods(t *testing.T, c client.Client, image string, old []string) []string {
	t.Helper()
	var names []string
	testenv.Eventually(t, 2*time.Minute, "two Ready replicas of the release, and no other pod", func() error {
		var pods corev1.PodList
		if err := c.List(t.Context(), &pods, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/instance": release}); err != nil {
			return err
		}
		names = names[:0]
		for _, p := range pods.Items {
			ready := slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
			switch ct := p.Spec.Containers[0]; {
			case slices.Contains(old, p.Name):
				return fmt.Errorf("pod %s of before the upgrade still exists", p.Name)
			case !ready || p.DeletionTimestamp != nil:
				return fmt.Errorf("pod %s not Ready (%s)", p.Name, p.Status.Phase)
			case ct.Image != image || ct.ImagePullPolicy != corev1.PullNever:
				return fmt.Errorf("pod %s runs %s (%s), want %s (Never)", p.Name, ct.Image, ct.ImagePullPolicy, image)
			}
			names = append(names, p.Name)
		}
		if len(names) != 2 {
			return fmt.Errorf("%d pods: %v", len(names), names)
		}
		return nil
	})
	var d appsv1.Deployment
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: release}, &d); err != nil {
		t.Fatal(err)
	}
	if d.Status.ReadyReplicas != 2 || d.Status.UpdatedReplicas != 2 {
		t.Errorf("Deployment: %d ready, %d updated, want 2 and 2", d.Status.ReadyReplicas, d.Status.UpdatedReplicas)
	}
	return names
}

// checkLeader waits for the leader-election Lease to be held by one of
// pods (controller-runtime's identity is "<hostname>_<uuid>", the hostname
// the pod's name) and for that pod, and no other of pods, to log that it
// acquired the Lease: exactly one leader. It returns the leader.
func checkLeader(t *testing.T, c client.Client, cs kubernetes.Interface, pods []string) string {
	t.Helper()
	var leader string
	testenv.Eventually(t, time.Minute, "one leader among "+strings.Join(pods, ", "), func() error {
		var l coordinationv1.Lease
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: leaderLease}, &l); err != nil {
			return err
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		leader = ""
		for _, p := range pods {
			if strings.HasPrefix(holder, p+"_") {
				leader = p
			}
		}
		if leader == "" {
			return fmt.Errorf("lease held by %q", holder)
		}
		var acquired []string
		for _, p := range pods {
			logs, err := cs.CoreV1().Pods(namespace).GetLogs(p, &corev1.PodLogOptions{}).DoRaw(t.Context())
			if err != nil {
				return fmt.Errorf("logs of %s: %w", p, err)
			}
			if bytes.Contains(logs, []byte("Successfully acquired lease")) {
				acquired = append(acquired, p)
			}
		}
		if !slices.Equal(acquired, []string{leader}) {
			return fmt.Errorf("lease held by %s, pods logging that they acquired it: %v", leader, acquired)
		}
		return nil
	})
	return leader
}

// boundLease waits for the ClusterLease id to be Bound (the API answers
// Bound from the binding; the status copy may follow) to a member that is
// Leased, fails when it is bound to another than member (when given), and
// returns the member's name.
func boundLease(t *testing.T, c client.Client, id, member string) string {
	t.Helper()
	var bound string
	testenv.Eventually(t, 30*time.Second, "lease "+id+" Bound to a Leased member", func() error {
		var l kobev1.ClusterLease
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: id}, &l); err != nil {
			return err
		}
		if l.Status.Phase != kobev1.LeaseBound || l.Status.InstanceRef == nil {
			return fmt.Errorf("ClusterLease %s: phase %q, instance %v", id, l.Status.Phase, l.Status.InstanceRef)
		}
		bound = l.Status.InstanceRef.Name
		var m kobev1.ClusterInstance
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: bound}, &m); err != nil {
			return err
		}
		if m.Status.Phase != kobev1.InstanceLeased {
			return fmt.Errorf("member %s: phase %s", bound, m.Status.Phase)
		}
		return nil
	})
	if member != "" && bound != member {
		t.Fatalf("ClusterLease %s is bound to %s, want %s", id, bound, member)
	}
	return bound
}

// memberAccessKey is the Secret the operator keeps its member access key in
// (memberaccess.KeySecretName; this module cannot import it).
const memberAccessKey = "kobe-member-access-key"

// checkUninstalled checks what the chart README says helm uninstall
// leaves after its leases, pools and members were deleted: no workload,
// Service, ServiceAccount, RBAC, PodDisruptionBudget or Helm record of the
// release, no lease, pool or member; kept are the CRDs
// (helm.sh/resource-policy: keep), the user's AccessPolicy and its Secret,
// the operator's audit records and lease ledgers (ConfigMaps), its member
// access key (a Secret) and its leader-election Lease.
func checkUninstalled(t *testing.T, c client.Client, hc *hostcluster.Cluster) {
	t.Helper()
	ctx := t.Context()
	in := client.InNamespace(namespace)
	count := func(list client.ObjectList, opts ...client.ListOption) int {
		t.Helper()
		if err := c.List(ctx, list, opts...); err != nil {
			t.Fatal(err)
		}
		return len(mustItems(t, list))
	}
	// A pod's grace period (30 s) plus the operator's own shutdown bound
	// how long its pods may take to go; 2 minutes leaves room for a busy
	// kubelet.
	var left []string
	if err := testenv.Poll(ctx, 2*time.Minute, func() error {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, in); err != nil {
			return err
		}
		left = left[:0]
		for _, p := range pods.Items {
			left = append(left, p.Name)
		}
		if m := count(&appsv1.ReplicaSetList{}, in); len(pods.Items)+m > 0 {
			described := make([]string, 0, len(pods.Items))
			for _, p := range pods.Items {
				described = append(described, describePod(&p))
			}
			return fmt.Errorf("%d ReplicaSets, pods: %s", m, strings.Join(described, "; "))
		}
		return nil
	}); err != nil {
		t.Fatalf("waiting for the release's pods and ReplicaSets gone: %v\nkubelet on them:\n%s", err, kubeletLines(hc, left))
	}
	for what, list := range map[string]client.ObjectList{
		"Deployments": &appsv1.DeploymentList{}, "Services": &corev1.ServiceList{}, "Roles": &rbacv1.RoleList{},
		"NetworkPolicies": &networkingv1.NetworkPolicyList{},
		"RoleBindings":    &rbacv1.RoleBindingList{}, "PodDisruptionBudgets": &policyv1.PodDisruptionBudgetList{},
		"ClusterPools": &kobev1.ClusterPoolList{}, "ClusterInstances": &kobev1.ClusterInstanceList{},
		"ClusterLeases": &kobev1.ClusterLeaseList{},
	} {
		if n := count(list, in); n != 0 {
			t.Errorf("%d %s left in %s", n, what, namespace)
		}
	}
	var sas corev1.ServiceAccountList
	count(&sas, in)
	if len(sas.Items) != 1 || sas.Items[0].Name != "default" {
		t.Errorf("ServiceAccounts left: %v, want only default", names(t, &sas))
	}
	var crs rbacv1.ClusterRoleList
	var crbs rbacv1.ClusterRoleBindingList
	count(&crs)
	count(&crbs)
	for _, n := range append(names(t, &crs), names(t, &crbs)...) {
		if strings.Contains(n, "kobe") {
			t.Errorf("cluster-wide RBAC %s left", n)
		}
	}

	var crds apiextv1.CustomResourceDefinitionList
	count(&crds, client.MatchingLabels{"app.kubernetes.io/part-of": "kobe"})
	if len(crds.Items) != 5 {
		t.Errorf("%d kobe CRDs kept, want 5: %v", len(crds.Items), names(t, &crds))
	}
	for _, crd := range crds.Items {
		if crd.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s kept without helm.sh/resource-policy: keep", crd.Name)
		}
	}
	var secrets corev1.SecretList
	count(&secrets, in)
	// The operator's member access key stays, so that a reinstall reads
	// members left behind (charts/kobe/README.md).
	if got := names(t, &secrets); !slices.Equal(got, []string{DemoSecret, memberAccessKey}) {
		t.Errorf("Secrets left: %v, want only the policy's %s and %s (no member access or PKI Secret, no API certificate, no Helm release record)", got, DemoSecret, memberAccessKey)
	}
	var policies kobev1.AccessPolicyList
	count(&policies, in)
	if got := names(t, &policies); !slices.Equal(got, []string{DemoPolicy}) {
		t.Errorf("AccessPolicies left: %v, want %s", got, DemoPolicy)
	}
	var cms corev1.ConfigMapList
	count(&cms, in)
	var ledgers, audits int
	for _, cm := range cms.Items {
		switch {
		case cm.Labels[leaseservice.LabelLedger] == "true":
			ledgers++
		case cm.Labels[auditrecord.Label] == auditrecord.LabelValue:
			audits++
		case cm.Name == "kube-root-ca.crt":
		default:
			t.Errorf("ConfigMap %s left, not a lease ledger or an audit record", cm.Name)
		}
	}
	// One requester held two leases (sim and default): two audit records,
	// at most one ledger (its entries go with the leases).
	if ledgers > 1 || audits != 2 {
		t.Errorf("%d lease ledgers and %d audit records kept, want at most 1 and 2", ledgers, audits)
	}
	var coord coordinationv1.LeaseList
	count(&coord, in)
	if got := names(t, &coord); !slices.Equal(got, []string{leaderLease}) {
		t.Errorf("Leases left: %v, want the leader election's %s", got, leaderLease)
	}
}

// readmeUninstall returns the arguments of each kubectl line of the chart
// README's uninstall block (the one that deletes clusterleases), so that the
// test runs what users are told to run.
func readmeUninstall(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "kobe", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]string
	for block := range strings.SplitSeq(string(b), "```sh\n") {
		block, _, _ = strings.Cut(block, "```")
		if !strings.Contains(block, "delete clusterleases,") {
			continue
		}
		for l := range strings.SplitSeq(block, "\n") {
			if rest, ok := strings.CutPrefix(l, "kubectl "); ok {
				lines = append(lines, strings.Fields(rest))
			}
		}
	}
	if len(lines) == 0 || !strings.Contains(string(b), "helm uninstall kobe -n kobe-system") {
		t.Fatal("charts/kobe/README.md has no uninstall block with kubectl lines and helm uninstall")
	}
	return lines
}

// mustItems are list's items.
func mustItems(t *testing.T, list client.ObjectList) []metav1.Object {
	t.Helper()
	objs, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// names are the sorted names of list's items.
func names(t *testing.T, list client.ObjectList) []string {
	t.Helper()
	var out []string
	for _, o := range mustItems(t, list) {
		out = append(out, o.GetName())
	}
	slices.Sort(out)
	return out
}

// cli runs bin/kobe against the forwarded API with the demo token and the
// chart's CA (--ca-file), with a config file of its own.
type cli struct {
	t                                 *testing.T
	bin, dir, endpoint, token, caFile string
}

func (k *cli) run(args ...string) []byte {
	k.t.Helper()
	cmd := exec.CommandContext(k.t.Context(), k.bin, append(args, "--ca-file", k.caFile)...)
	cmd.Env = append(os.Environ(), "KOBE_ENDPOINT="+k.endpoint, "KOBE_TOKEN="+k.token,
		"KOBE_CONFIG="+filepath.Join(k.dir, "config.yaml"), "XDG_RUNTIME_DIR="+k.dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		k.t.Fatalf("kobe %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

func (k *cli) json(v any, args ...string) {
	k.t.Helper()
	out := k.run(append(args, "-o", "json")...)
	if err := json.Unmarshal(out, v); err != nil {
		k.t.Fatalf("kobe %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// describePod says what a failure message needs to know about a pod that
// should be gone: name, owner, phase and whether and since when it is
// being deleted.
func describePod(p *corev1.Pod) string {
	owner := "no owner"
	if ref := metav1.GetControllerOf(p); ref != nil {
		owner = ref.Kind + "/" + ref.Name
	}
	deleting := "not deleted"
	if p.DeletionTimestamp != nil {
		deleting = fmt.Sprintf("deleting since %s (grace %ds, finalizers %v)",
			p.DeletionTimestamp.Format(time.RFC3339), ptr.Deref(p.DeletionGracePeriodSeconds, -1), p.Finalizers)
	}
	return fmt.Sprintf("%s (%s, %s, node %q, %s)", p.Name, owner, p.Status.Phase, p.Spec.NodeName, deleting)
}

// kubeletLines returns the host kubelet's last log lines that name one of
// pods, so that a pod stuck terminating says why.
func kubeletLines(hc *hostcluster.Cluster, pods []string) string {
	b, err := os.ReadFile(filepath.Join(hc.Dir, "logs", "kubelet.log"))
	if err != nil {
		return err.Error()
	}
	var lines []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if slices.ContainsFunc(pods, func(p string) bool { return strings.Contains(line, p) }) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}
