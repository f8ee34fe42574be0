//go:build root

package lifecycle_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/backend/incluster"
	kubebackend "github.com/kunobi-ninja/kobe/internal/backend/kubernetes"
	"github.com/kunobi-ninja/kobe/internal/gates"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/hostcluster"
)

const (
	ns      = "kobe-system"
	otherNS = "elsewhere"
	taint   = "kobe.test/members"
)

// operatorSelector stands for the operator pods' labels.
var operatorSelector = map[string]string{"app.kubernetes.io/name": "kobe"}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// env is one host cluster shared by the tests of this package.
type env struct {
	host *hostcluster.Cluster
	c    client.Client
}

// start brings up the host cluster with the control-plane images of make
// image-controlplane, kobe's CRDs (members' objects are owned by real
// ClusterInstances, else the host's garbage collector would remove them),
// the namespaces and a PriorityClass; extra are more image archives for
// the host's node.
func start(t *testing.T, extra ...string) *env {
	t.Helper()
	root := testenv.RepoRoot()
	dir := envOr("CONTROLPLANE_IMAGE_DIR", filepath.Join(root, "bin", "images"))
	pause := envOr("HOSTCLUSTER_PAUSE_TAR", filepath.Join(dir, "pause.tar"))
	tars := []string{pause}
	for _, n := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		tars = append(tars, filepath.Join(dir, n+".tar"))
	}
	for _, f := range tars {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run `make image-pause image-controlplane` (make test-node does)", f)
		}
	}
	tars = append(tars, extra...)
	host := hostcluster.Start(t, hostcluster.Options{
		PauseImage: envOr("HOSTCLUSTER_PAUSE_IMAGE", "kobe.local/pause:v1"),
		Images:     tars,
	})
	if out, err := testenv.Kubectl(t, host.Kubeconfig, "apply", "--server-side", "-f", filepath.Join(root, "config", "crd", "bases")); err != nil {
		t.Fatalf("installing CRDs: %v\n%s", err, out)
	}
	if out, err := testenv.Kubectl(t, host.Kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "crd/clusterinstances.kobe.kunobi.ninja"); err != nil {
		t.Fatalf("waiting for CRDs: %v\n%s", err, out)
	}
	ctrllog.SetLogger(logr.Discard()) // controller-runtime's client logs nothing the test needs
	c, err := client.New(host.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{ns, otherNS} {
		if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "kobe-members"}, Value: 1000}
	if err := c.Create(t.Context(), pc); err != nil {
		t.Fatal(err)
	}
	return &env{host: host, c: c}
}

// newBackend is the machinery with tmpl, as the operator wires it.
func (e *env) newBackend(t *testing.T, tmpl incluster.Template, unschedulable time.Duration) *incluster.Backend {
	t.Helper()
	b, err := incluster.New(incluster.Options{
		Type: kobev1.BackendKubernetes, Template: tmpl, Client: e.c, Namespace: ns,
		OperatorSelector: operatorSelector, UnschedulableTimeout: unschedulable,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// member creates a real ClusterInstance (the owner of the member's objects)
// and returns the backend's view of it.
func (e *env) member(t *testing.T, namespace, name string, mode kobev1.AccessMode, k *kobev1.KubernetesBackendSpec) backend.Member {
	t.Helper()
	inst := &kobev1.ClusterInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: kobev1.ClusterInstanceSpec{
			PoolRef: kobev1.ObjectRef{Name: "ci", UID: "pool-uid"},
			Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes, Kubernetes: k},
			Access:  &kobev1.AccessSpec{Mode: mode},
		},
	}
	if err := e.c.Create(t.Context(), inst); err != nil {
		t.Fatal(err)
	}
	return backend.Member{Namespace: namespace, Name: name, UID: inst.UID, Pool: "ci", Spec: inst.Spec, Created: inst.CreationTimestamp.Time}
}

// objectsOf lists every object of every kind carrying the member's UID label.
func (e *env) objectsOf(t *testing.T, namespace string, uid types.UID) []string {
	t.Helper()
	sel := client.MatchingLabels{kobev1.LabelMemberUID: string(uid)}
	var out []string
	lists := map[string]client.ObjectList{
		"Pod": &corev1.PodList{}, "Service": &corev1.ServiceList{}, "Secret": &corev1.SecretList{},
		"NetworkPolicy": &networkingv1.NetworkPolicyList{}, "PodDisruptionBudget": &policyv1.PodDisruptionBudgetList{},
	}
	for kind, l := range lists {
		if err := e.c.List(t.Context(), l, client.InNamespace(namespace), sel); err != nil {
			t.Fatal(err)
		}
		n := 0
		switch l := l.(type) {
		case *corev1.PodList:
			n = len(l.Items)
		case *corev1.ServiceList:
			n = len(l.Items)
		case *corev1.SecretList:
			n = len(l.Items)
		case *networkingv1.NetworkPolicyList:
			n = len(l.Items)
		case *policyv1.PodDisruptionBudgetList:
			n = len(l.Items)
		}
		for range n {
			out = append(out, kind)
		}
	}
	slices.Sort(out)
	return out
}

func observeUntil(t *testing.T, b *incluster.Backend, m backend.Member, want backend.State, within time.Duration) backend.Observation {
	t.Helper()
	var obs backend.Observation
	testenv.Eventually(t, within, fmt.Sprintf("member %s %s", m.Name, want), func() error {
		var err error
		obs, err = b.Observe(t.Context(), m)
		if err != nil {
			return err
		}
		if obs.State != want {
			return fmt.Errorf("state %s: %s", obs.State, obs.Message)
		}
		return nil
	})
	return obs
}

var allKinds = []string{"NetworkPolicy", "Pod", "PodDisruptionBudget", "Secret", "Service"}

func TestInCluster(t *testing.T) {
	e := start(t)
	t.Run("kubernetes template", func(t *testing.T) {
		res := &kobev1.KubernetesResources{APIServer: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("300Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("900Mi")},
		}}
		spec := &kobev1.KubernetesBackendSpec{
			Images:    &kobev1.KubernetesImages{PullPolicy: corev1.PullNever},
			Resources: res,
			Placement: &kobev1.Placement{
				NodeSelector:      map[string]string{corev1.LabelHostname: e.host.NodeName},
				Tolerations:       []corev1.Toleration{{Key: taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				PriorityClassName: "kobe-members",
			},
		}
		m := e.member(t, ns, "pool-ci-0", kobev1.AccessDirect, spec)
		lifecycle(t, e, e.newBackend(t, kubebackend.Template{}, 0), m, kubebackend.APIPort, func(t *testing.T, p *corev1.Pod) {
			byName := map[string]corev1.Container{}
			for _, c := range p.Spec.Containers {
				byName[c.Name] = c
			}
			if len(byName) != 3 {
				t.Fatalf("containers %v, want etcd, kube-apiserver, kube-controller-manager", p.Spec.Containers)
			}
			want := map[string]corev1.ResourceRequirements{
				"etcd":                    kubebackend.DefaultResources.Etcd,
				"kube-controller-manager": kubebackend.DefaultResources.ControllerManager,
				// The pool's CPU and memory; ephemeral storage from the defaults.
				"kube-apiserver": {
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("300Mi"),
						corev1.ResourceEphemeralStorage: kubebackend.DefaultResources.APIServer.Requests[corev1.ResourceEphemeralStorage]},
					Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("900Mi"),
						corev1.ResourceEphemeralStorage: kubebackend.DefaultResources.APIServer.Limits[corev1.ResourceEphemeralStorage]},
				},
			}
			for n, w := range want {
				if got := byName[n].Resources; !equality.Semantic.DeepEqual(got, w) {
					t.Errorf("%s resources = %v, want %v", n, got, w)
				}
				if byName[n].Image == "" || byName[n].ImagePullPolicy != corev1.PullNever {
					t.Errorf("%s image %q pull %s, want the default image and Never", n, byName[n].Image, byName[n].ImagePullPolicy)
				}
			}
			if img := byName["kube-apiserver"].Image; img != "registry.k8s.io/kube-apiserver:v"+kubebackend.DefaultVersion {
				t.Errorf("kube-apiserver image %q", img)
			}
			if p.Spec.NodeSelector[corev1.LabelHostname] != e.host.NodeName || len(p.Spec.NodeSelector) != 1 {
				t.Errorf("nodeSelector %v", p.Spec.NodeSelector)
			}
			if !slices.ContainsFunc(p.Spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == taint }) {
				t.Errorf("tolerations %v lack %s", p.Spec.Tolerations, taint)
			}
			if p.Spec.PriorityClassName != "kobe-members" || p.Spec.Priority == nil || *p.Spec.Priority != 1000 {
				t.Errorf("priority class %q priority %v", p.Spec.PriorityClassName, p.Spec.Priority)
			}
		}, true)
	})
	t.Run("minimal template", func(t *testing.T) {
		m := e.member(t, ns, "pool-ci-1", kobev1.AccessProxy, &kobev1.KubernetesBackendSpec{
			Images: &kobev1.KubernetesImages{PullPolicy: corev1.PullIfNotPresent},
		})
		lifecycle(t, e, e.newBackend(t, minimalTemplate{}, 0), m, minimalPort, func(t *testing.T, p *corev1.Pod) {
			if len(p.Spec.Containers) != 2 {
				t.Errorf("containers %d, want 2", len(p.Spec.Containers))
			}
			if len(p.Spec.NodeSelector) != 0 || p.Spec.PriorityClassName != "" {
				t.Errorf("placement set without a pool asking: %v %q", p.Spec.NodeSelector, p.Spec.PriorityClassName)
			}
		}, false)
	})
	t.Run("delete a running member", func(t *testing.T) {
		b := e.newBackend(t, kubebackend.Template{}, 0)
		m := e.member(t, ns, "pool-ci-2", kobev1.AccessProxy, &kobev1.KubernetesBackendSpec{
			Images: &kobev1.KubernetesImages{PullPolicy: corev1.PullNever},
		})
		if err := b.Create(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		observeUntil(t, b, m, backend.StateReady, 3*time.Minute)
		base := types.NamespacedName{Namespace: m.Namespace, Name: "kobe-" + m.Name}
		svc, pod := &corev1.Service{}, &corev1.Pod{}
		if err := e.c.Get(t.Context(), base, svc); err != nil {
			t.Fatal(err)
		}
		if err := e.c.Get(t.Context(), types.NamespacedName{Namespace: m.Namespace, Name: base.Name + "-server-0"}, pod); err != nil {
			t.Fatal(err)
		}
		manifest := manifestOf(t, b, m, svc, pod)
		start := time.Now()
		testenv.Eventually(t, time.Minute, "Delete reports gone", func() error {
			gone, err := b.Delete(t.Context(), m)
			if err != nil {
				return err
			}
			if !gone {
				return fmt.Errorf("not gone: %v", e.objectsOf(t, m.Namespace, m.UID))
			}
			return nil
		})
		t.Logf("a running member gone %.2fs after the first Delete", time.Since(start).Seconds())
		if got := e.objectsOf(t, m.Namespace, m.UID); len(got) != 0 {
			t.Fatalf("Delete reported gone with %v left", got)
		}
		verifyGone(t, b, m, manifest)
	})
	t.Run("unschedulable and sweep", func(t *testing.T) { sweep(t, e) })
}

// lifecycle takes a member through Create (twice), Ready, kubectl against
// it, the objects' shape, a deleted pod (Failed, never re-created) and
// Delete (gone, nothing left).
func lifecycle(t *testing.T, e *env, b *incluster.Backend, m backend.Member, port int32, checkPod func(*testing.T, *corev1.Pod), stallEtcd bool) {
	ctx := t.Context()
	start := time.Now()
	if obs, err := b.Observe(ctx, m); err != nil || obs.State != backend.StateAbsent {
		t.Fatalf("before Create: %+v %v, want Absent", obs, err)
	}
	for range 2 {
		if err := b.Create(ctx, m); err != nil {
			t.Fatalf("Create: %v", err)
		}
	}
	obs := observeUntil(t, b, m, backend.StateReady, 3*time.Minute)
	t.Logf("%s Ready %.1fs after Create", m.Name, time.Since(start).Seconds())

	svc := &corev1.Service{}
	if err := e.c.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: "kobe-" + m.Name}, svc); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("https://%s:%d", svc.Spec.ClusterIP, port); obs.Access.Endpoint != want {
		t.Errorf("Endpoint %s, want %s", obs.Access.Endpoint, want)
	}
	kc := testenv.KubeconfigFile(t, obs.Access.AdminKubeconfig)
	testenv.Eventually(t, 30*time.Second, "kubectl get ns against the member", func() error {
		out, err := testenv.Kubectl(t, kc, "get", "ns", "-o", "name")
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		if !strings.Contains(out, "namespace/kube-system") {
			return fmt.Errorf("no kube-system in %q", out)
		}
		return nil
	})
	out, err := testenv.Kubectl(t, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}")
	if err != nil || !strings.Contains(out, "system:masters") {
		t.Errorf("admin kubeconfig identity groups %q (%v), want system:masters", out, err)
	}

	if got := e.objectsOf(t, m.Namespace, m.UID); !slices.Equal(got, allKinds) {
		t.Fatalf("objects %v, want one each of %v", got, allKinds)
	}
	pod := checkObjects(t, e, m, port)
	checkPod(t, pod)
	manifest := manifestOf(t, b, m, svc, pod)

	if stallEtcd {
		// The gates every member must pass (as for local), and the one
		// that needs the controller manager; then the health failure.
		want := append(kobev1.AlwaysGates(), kobev1.GateDefaultServiceAccount)
		gatesAt := time.Now()
		testenv.Eventually(t, time.Minute, "readiness gates "+strings.Join(want, ", "), func() error {
			res := gates.Evaluate(ctx, obs.Access.AdminKubeconfig, kobev1.GatesOfTypes(want...), nil, 10*time.Second)
			if !gates.AllPassed(res) {
				return fmt.Errorf("%+v", res)
			}
			return nil
		})
		t.Logf("gates %v passed %.1fs after Ready", want, time.Since(gatesAt).Seconds())
		unhealthy(t, e, b, m, pod)
	}

	// Create on a complete member changes nothing.
	if err := b.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), again); err != nil || again.UID != pod.UID {
		t.Fatalf("pod after a second Create: %v uid %s, want %s", err, again.UID, pod.UID)
	}

	// A deleted control-plane pod reaps the member: Failed, never re-created.
	if err := e.c.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	failedAt := time.Now()
	obs = observeUntil(t, b, m, backend.StateFailed, 10*time.Second)
	t.Logf("Failed %.2fs after the pod's deletion: %s", time.Since(failedAt).Seconds(), obs.Message)
	testenv.Eventually(t, time.Minute, "pod gone", func() error {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod still there (%w)", err)
	})
	if err := b.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got := e.objectsOf(t, m.Namespace, m.UID); slices.Contains(got, "Pod") {
		t.Fatalf("Create re-made a pod of a reaped member: %v", got)
	}
	if obs, err := b.Observe(ctx, m); err != nil || obs.State != backend.StateFailed || !strings.Contains(obs.Message, "gone") {
		t.Fatalf("after the pod is gone: %+v %v, want Failed (gone)", obs, err)
	}

	// Delete until gone; nothing with the member's label is left.
	delStart := time.Now()
	testenv.Eventually(t, time.Minute, "Delete reports gone", func() error {
		gone, err := b.Delete(ctx, m)
		if err != nil {
			return err
		}
		if !gone {
			return fmt.Errorf("not gone: %v", e.objectsOf(t, m.Namespace, m.UID))
		}
		return nil
	})
	t.Logf("gone %.2fs after the first Delete", time.Since(delStart).Seconds())
	if got := e.objectsOf(t, m.Namespace, m.UID); len(got) != 0 {
		t.Fatalf("Delete reported gone with %v left", got)
	}
	if obs, err := b.Observe(ctx, m); err != nil || obs.State != backend.StateAbsent {
		t.Fatalf("after Delete: %+v %v, want Absent", obs, err)
	}
	verifyGone(t, b, m, manifest)
	if gone, err := b.Delete(ctx, m); err != nil || !gone {
		t.Fatalf("second Delete: %v %v, want gone", gone, err)
	}
}

// manifestOf is the member's creation manifest (backend.Verifier) while it
// is Ready: one entry per host object, the Service and the pod among them
// with their UIDs.
func manifestOf(t *testing.T, b *incluster.Backend, m backend.Member, svc *corev1.Service, pod *corev1.Pod) []kobev1.ManifestResource {
	t.Helper()
	manifest, err := b.Manifest(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range manifest {
		kinds = append(kinds, r.Kind)
		if r.ID == "" {
			t.Errorf("manifest entry %+v has no UID", r)
		}
	}
	if !slices.Equal(kinds, allKinds) {
		t.Errorf("manifest kinds %v, want one each of %v", kinds, allKinds)
	}
	for _, want := range []kobev1.ManifestResource{
		{Kind: "Service", Name: svc.Namespace + "/" + svc.Name, ID: string(svc.UID)},
		{Kind: "Pod", Name: pod.Namespace + "/" + pod.Name, ID: string(pod.UID)},
	} {
		if !slices.Contains(manifest, want) {
			t.Errorf("manifest %v lacks %v", manifest, want)
		}
	}
	return manifest
}

// verifyGone asserts that Verify, after Delete reported the member gone,
// proves every resource of its manifest absent, finds nothing else of it,
// and proves its client CA gone.
func verifyGone(t *testing.T, b *incluster.Backend, m backend.Member, manifest []kobev1.ManifestResource) {
	t.Helper()
	checks, err := b.Verify(t.Context(), m, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != len(manifest)+1 || checks[len(checks)-1].Kind != "Credentials" {
		t.Errorf("%d checks for %d resources, want one each and the client CA: %+v", len(checks), len(manifest), checks)
	}
	for _, c := range checks {
		if !c.Absent {
			t.Errorf("after Delete: %s %s (%s) not proven absent: %s", c.Kind, c.Name, c.ID, c.Detail)
		}
	}
}

// checkObjects asserts labels and owner on every object, the PDB, the
// NetworkPolicy and the pod's security settings, and returns the pod.
func checkObjects(t *testing.T, e *env, m backend.Member, port int32) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: m.Namespace, Name: n} }
	base := "kobe-" + m.Name
	objs := map[string]client.Object{
		base: &corev1.Service{}, base + "-pki": &corev1.Secret{}, base + "-server-0": &corev1.Pod{},
	}
	pdb, np := &policyv1.PodDisruptionBudget{}, &networkingv1.NetworkPolicy{}
	for n, o := range objs {
		if err := e.c.Get(ctx, key(n), o); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.Get(ctx, key(base), pdb); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Get(ctx, key(base), np); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{objs[base], objs[base+"-pki"], objs[base+"-server-0"], pdb, np} {
		l := o.GetLabels()
		if l[kobev1.LabelMemberUID] != string(m.UID) || l[kobev1.LabelPool] != m.Pool || l[kobev1.LabelInstance] != m.Name || l[incluster.LabelManagedBy] != "kobe" {
			t.Errorf("%T %s labels %v", o, o.GetName(), l)
		}
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != m.UID || refs[0].Kind != "ClusterInstance" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%T %s owners %v", o, o.GetName(), refs)
		}
	}
	sel := map[string]string{incluster.LabelManagedBy: "kobe", incluster.LabelBackend: string(kobev1.BackendKubernetes), kobev1.LabelMemberUID: string(m.UID)}

	if pdb.Spec.MinAvailable == nil || *pdb.Spec.MinAvailable != intstr.FromInt32(1) || !equality.Semantic.DeepEqual(pdb.Spec.Selector.MatchLabels, sel) {
		t.Errorf("PDB spec %+v", pdb.Spec)
	}
	testenv.Eventually(t, 30*time.Second, "the PDB counts the member's pod", func() error {
		if err := e.c.Get(ctx, key(base), pdb); err != nil {
			return err
		}
		if pdb.Status.ExpectedPods != 1 || pdb.Status.CurrentHealthy != 1 {
			return fmt.Errorf("PDB expects %d pods, %d healthy; want 1 and 1", pdb.Status.ExpectedPods, pdb.Status.CurrentHealthy)
		}
		return nil
	})

	apiPort := []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}}
	own := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: sel}}}
	wantIngress := []networkingv1.NetworkPolicyIngressRule{
		{From: own},
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: operatorSelector}}}, Ports: apiPort},
		// The member's bootstrap Jobs.
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{kobev1.LabelBootstrapFor: string(m.UID)}}}}, Ports: apiPort},
	}
	if m.Spec.Access.Mode == kobev1.AccessDirect {
		wantIngress = append(wantIngress, networkingv1.NetworkPolicyIngressRule{Ports: apiPort})
	}
	// Egress to the member's own pods only (no DNS to anywhere).
	wantEgress := []networkingv1.NetworkPolicyEgressRule{{To: own}}
	if !equality.Semantic.DeepEqual(np.Spec.PodSelector.MatchLabels, sel) ||
		!slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) ||
		!equality.Semantic.DeepEqual(np.Spec.Ingress, wantIngress) || !equality.Semantic.DeepEqual(np.Spec.Egress, wantEgress) {
		t.Errorf("NetworkPolicy spec %+v\nwant ingress %+v\negress %+v", np.Spec, wantIngress, wantEgress)
	}

	svc := objs[base].(*corev1.Service)
	// The Service selects the control plane only (not node pods).
	svcSel := map[string]string{incluster.LabelComponent: "control-plane"}
	for k, v := range sel {
		svcSel[k] = v
	}
	if !equality.Semantic.DeepEqual(svc.Spec.Selector, svcSel) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != port {
		t.Errorf("Service spec %+v", svc.Spec)
	}
	sec := objs[base+"-pki"].(*corev1.Secret)
	if sec.Annotations[incluster.AnnotationClusterIP] != svc.Spec.ClusterIP {
		t.Errorf("PKI Secret made for %q, Service has %q", sec.Annotations[incluster.AnnotationClusterIP], svc.Spec.ClusterIP)
	}

	pod := objs[base+"-server-0"].(*corev1.Pod)
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "ClusterInstance" {
		t.Errorf("pod is not a bare pod owned by its ClusterInstance: %v", pod.OwnerReferences)
	}
	var spread *corev1.TopologySpreadConstraint
	for i := range pod.Spec.TopologySpreadConstraints {
		if pod.Spec.TopologySpreadConstraints[i].TopologyKey == corev1.LabelHostname {
			spread = &pod.Spec.TopologySpreadConstraints[i]
		}
	}
	if spread == nil || spread.MaxSkew != 1 || spread.WhenUnsatisfiable != corev1.ScheduleAnyway || spread.LabelSelector.MatchLabels[kobev1.LabelPool] != m.Pool {
		t.Errorf("topology spread %+v", pod.Spec.TopologySpreadConstraints)
	}
	for _, c := range pod.Spec.Containers {
		if c.LivenessProbe != nil {
			t.Errorf("container %s has a liveness probe", c.Name)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if c.Resources.Requests.Name(r, resource.DecimalSI).IsZero() || c.Resources.Limits.Name(r, resource.DecimalSI).IsZero() {
				t.Errorf("container %s lacks a %s request or limit: %v", c.Name, r, c.Resources)
			}
		}
		if c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation {
			t.Errorf("container %s may escalate privileges", c.Name)
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		for _, it := range v.Secret.Items {
			if it.Key == incluster.KeyClientCAKey || it.Key == incluster.KeyAdminKubeconfig {
				t.Errorf("pod mounts %s", it.Key)
			}
		}
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("restartPolicy %s", pod.Spec.RestartPolicy)
	}
	return pod
}

// sweep: members whose pods no node can take (a nodeSelector nothing
// matches) are Provisioning, then Failed after UnschedulableTimeout; Sweep
// removes the objects of the member UID nobody owns and keeps the owned
// member's and those of another namespace.
func sweep(t *testing.T, e *env) {
	ctx := t.Context()
	b := e.newBackend(t, kubebackend.Template{}, 4*time.Second)
	nowhere := &kobev1.KubernetesBackendSpec{
		Images:    &kobev1.KubernetesImages{PullPolicy: corev1.PullNever},
		Placement: &kobev1.Placement{NodeSelector: map[string]string{"kobe.test/no-such-node": "x"}},
	}
	owned := e.member(t, ns, "pool-ci-owned", kobev1.AccessProxy, nowhere)
	orphan := e.member(t, ns, "pool-ci-orphan", kobev1.AccessProxy, nowhere)
	foreign := e.member(t, otherNS, "pool-ci-foreign", kobev1.AccessProxy, nowhere)
	for _, m := range []backend.Member{owned, orphan, foreign} {
		if err := b.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	obs := observeUntil(t, b, owned, backend.StateProvisioning, 30*time.Second)
	testenv.Eventually(t, 30*time.Second, "unschedulable reported", func() error {
		obs, _ = b.Observe(ctx, owned)
		if !strings.Contains(obs.Message, "unschedulable") {
			return fmt.Errorf("%s: %s", obs.State, obs.Message)
		}
		return nil
	})
	t.Logf("while unschedulable: %s: %s", obs.State, obs.Message)
	obs = observeUntil(t, b, owned, backend.StateFailed, 30*time.Second)
	if !strings.Contains(obs.Message, "unschedulable for more than") {
		t.Errorf("Failed message %q does not say the pod is unschedulable", obs.Message)
	}

	// Leaks reports what Sweep deletes, and deletes nothing.
	leaked, err := b.Leaks(ctx, func(_ string, uid types.UID) bool { return uid == owned.UID })
	if err != nil {
		t.Fatal(err)
	}
	if got := e.objectsOf(t, ns, orphan.UID); len(leaked) != len(allKinds) || !slices.Equal(got, allKinds) {
		t.Errorf("Leaks = %v, and the orphan has %v left: want its %d objects reported and kept", leaked, got, len(allKinds))
	}
	removed, err := b.Sweep(ctx, func(_ string, uid types.UID) bool { return uid == owned.UID })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("swept: %v", removed)
	if !slices.Equal(removed, leaked) {
		t.Errorf("Sweep removed %v, Leaks reported %v", removed, leaked)
	}
	if len(removed) != len(allKinds) {
		t.Errorf("removed %v, want the orphan's %d objects", removed, len(allKinds))
	}
	for _, r := range removed {
		if !strings.Contains(r, "pool-ci-orphan") {
			t.Errorf("removed %s, which is not the orphan's", r)
		}
	}
	testenv.Eventually(t, time.Minute, "orphan's objects gone", func() error {
		if got := e.objectsOf(t, ns, orphan.UID); len(got) != 0 {
			return fmt.Errorf("left: %v", got)
		}
		return nil
	})
	if got := e.objectsOf(t, ns, owned.UID); !slices.Equal(got, allKinds) {
		t.Errorf("owned member's objects %v, want %v", got, allKinds)
	}
	if got := e.objectsOf(t, otherNS, foreign.UID); !slices.Equal(got, allKinds) {
		t.Errorf("other namespace's objects %v, want %v", got, allKinds)
	}
	for _, m := range []backend.Member{owned, foreign} {
		testenv.Eventually(t, time.Minute, "Delete "+m.Name, func() error {
			gone, err := b.Delete(ctx, m)
			if err != nil || !gone {
				return fmt.Errorf("gone %v err %w", gone, err)
			}
			return nil
		})
	}
}

// unhealthy stops the member's etcd (SIGSTOP): its API server fails /readyz,
// the pod turns not Ready and Observe stops reporting Ready, which is what
// the operator's health checks recycle on; nothing restarts the API server
// (no liveness probe), and once etcd runs again the member is Ready again
// with no container restarted.
func unhealthy(t *testing.T, e *env, b *incluster.Backend, m backend.Member, pod *corev1.Pod) {
	t.Helper()
	pid := processOf(t, string(pod.UID), "etcd")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	obs := observeUntil(t, b, m, backend.StateProvisioning, time.Minute)
	t.Logf("etcd stopped: Observe left Ready after %.1fs: %s", time.Since(stopped).Seconds(), obs.Message)
	resume()
	observeUntil(t, b, m, backend.StateReady, time.Minute)
	got := &corev1.Pod{}
	if err := e.c.Get(t.Context(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("container %s restarted %d times while etcd was stopped", cs.Name, cs.RestartCount)
		}
	}
}

// processOf finds the process called comm in the pod with uid, by its cgroup.
func processOf(t *testing.T, uid, comm string) int {
	t.Helper()
	// cgroupfs names a pod's cgroup pod<uid>; systemd's pod<uid with _>.
	marks := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join("/proc", en.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, mk := range marks {
			if strings.Contains(string(cg), mk) {
				return pid
			}
		}
	}
	t.Fatalf("no %s process in pod %s", comm, uid)
	return 0
}
