//go:build root

package incluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/netpolprobe"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const (
	poolName = "incluster"
	// memberDeadline bounds waits that include building members: two
	// control-plane pods (etcd, kube-apiserver, kube-controller-manager)
	// starting at once on 2 cores.
	memberDeadline = 4 * time.Minute
)

type objectList struct {
	kind  string
	list  client.ObjectList
	names func() []string
}

// hostObjectLists are the kinds a host-cluster member is made of.
func hostObjectLists() []objectList {
	pods, svcs, secrets := &corev1.PodList{}, &corev1.ServiceList{}, &corev1.SecretList{}
	nps, pdbs := &networkingv1.NetworkPolicyList{}, &policyv1.PodDisruptionBudgetList{}
	jobs := &batchv1.JobList{}
	return []objectList{
		{"Job", jobs, func() []string { return namesOf(jobs.Items, func(o batchv1.Job) string { return o.Name }) }},
		{"Pod", pods, func() []string { return namesOf(pods.Items, func(o corev1.Pod) string { return o.Name }) }},
		{"Service", svcs, func() []string { return namesOf(svcs.Items, func(o corev1.Service) string { return o.Name }) }},
		{"Secret", secrets, func() []string { return namesOf(secrets.Items, func(o corev1.Secret) string { return o.Name }) }},
		{"NetworkPolicy", nps, func() []string {
			return namesOf(nps.Items, func(o networkingv1.NetworkPolicy) string { return o.Name })
		}},
		{"PodDisruptionBudget", pdbs, func() []string {
			return namesOf(pdbs.Items, func(o policyv1.PodDisruptionBudget) string { return o.Name })
		}},
	}
}

func namesOf[T any](items []T, name func(T) string) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, name(it))
	}
	return out
}

// TestMembersInsideTheHostCluster is the kubernetes backend end to end: a pool of 2 with
// the kubernetes backend on the real-node host reaches READY 2; a lease
// through the CLI returns a kubeconfig through the connect proxy, with which
// kubectl lists namespaces, applies a Deployment and holds a watch; after
// `kobe release` the same kubeconfig fails within a second and the watch is
// closed; the member's host objects go and the pool refills; a deleted
// control-plane pod and an API server that stops answering each recycle
// their member; a Direct lease's certificate and a token minted inside stop
// working within 2 s of its release (bootstrapJobs); deleting the pool
// leaves no host object with kobe's labels.
func TestMembersInsideTheHostCluster(t *testing.T) {
	f := start(t)
	ctx := t.Context()
	f.token = fmt.Sprintf("incluster-%d", time.Now().UnixNano())
	f.createPolicyAndPool(t)

	began := time.Now()
	f.waitPoolReady(t, 2)
	t.Logf("pool of 2 READY in %v", time.Since(began).Round(time.Millisecond))

	members := f.readyMembers(t)
	for _, m := range members {
		objs, err := f.hostObjects(ctx, kobev1.LabelMemberUID+"="+string(m.UID))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("member %s: %v", m.Name, objs)
		for _, kind := range []string{"Pod/", "Service/", "Secret/", "NetworkPolicy/", "PodDisruptionBudget/"} {
			if !containsPrefix(objs, kind) {
				t.Errorf("member %s has no %s host object: %v", m.Name, strings.TrimSuffix(kind, "/"), objs)
			}
		}
	}

	t.Run("the pool says the bridge CNI does not enforce NetworkPolicy", func(t *testing.T) { f.networkPolicyNotEnforced(t) })
	t.Run("lease through the connect proxy, then release cuts it", func(t *testing.T) { f.leaseAndRelease(t) })
	t.Run("a deleted control-plane pod recycles its member", func(t *testing.T) { f.deletedPodRecycles(t) })
	t.Run("an API server failing health checks recycles its member", func(t *testing.T) { f.frozenAPIServerRecycles(t) })
	t.Run("bootstrap Jobs with parameters run before hand-out, a Direct lease's credentials end with its release; a failing Job fails its member", func(t *testing.T) { f.bootstrapJobs(t) })
	t.Run("deleting the pool leaves no host object", func(t *testing.T) { f.deletePool(t) })
}

// networkPolicyNotEnforced: the operator's probe finds that the host's
// bridge CNI lets a pod under a deny-all NetworkPolicy connect, the pool
// reports it (NetworkPolicyEnforced False), and the probe's pods and policy
// are gone afterwards. The operator runs with the requirement off, so the
// pool still filled.
func (f *fixture) networkPolicyNotEnforced(t *testing.T) {
	ctx := t.Context()
	testenv.Eventually(t, memberDeadline, "pool "+poolName+" NetworkPolicyEnforced False", func() error {
		var p kobev1.ClusterPool
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: poolName}, &p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionNetworkPolicyEnforced)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kobev1.ReasonNetworkPolicyNotEnforced {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	testenv.Eventually(t, time.Minute, "the probe's objects gone", func() error {
		objs, err := f.hostObjects(ctx, netpolprobe.LabelProbe)
		if err != nil {
			return err
		}
		if len(objs) > 0 {
			return fmt.Errorf("left: %v", objs)
		}
		return nil
	})
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func (f *fixture) createPolicyAndPool(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "incluster-token", Namespace: namespace}, StringData: map[string]string{"token": f.token}},
		&kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "incluster", Namespace: namespace},
			Spec: kobev1.AccessPolicySpec{
				Auth:     kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "incluster-token"}}},
				Identity: "incluster-e2e",
				Rules: []kobev1.AccessRule{{Pools: []string{"*"}, MaxTTL: &metav1.Duration{Duration: time.Hour},
					MaxConcurrentLeases: ptr.To[int32](5)}},
			},
		},
		&kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: namespace},
			Spec: kobev1.ClusterPoolSpec{
				Size: ptr.To[int32](2),
				TTL:  &metav1.Duration{Duration: 30 * time.Minute},
				Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes, Kubernetes: &kobev1.KubernetesBackendSpec{
					// Nothing is pulled here: the images were imported.
					Images: &kobev1.KubernetesImages{PullPolicy: corev1.PullNever},
				}},
				Access:      &kobev1.AccessSpec{Mode: kobev1.AccessProxy},
				HealthCheck: &kobev1.HealthCheckSpec{IntervalSeconds: 2, FailureThreshold: 2},
			},
		},
	} {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// waitPoolReady waits for the pool to show n Ready members.
func (f *fixture) waitPoolReady(t *testing.T, n int32) {
	t.Helper()
	testenv.Eventually(t, memberDeadline, fmt.Sprintf("pool %s READY %d", poolName, n), func() error {
		var p kobev1.ClusterPool
		if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: poolName}, &p); err != nil {
			return err
		}
		if p.Status.Ready < n {
			return fmt.Errorf("phase %s, %d Ready; conditions %v", p.Status.Phase, p.Status.Ready, conditionSummary(p.Status.Conditions))
		}
		return nil
	})
}

func conditionSummary(cs []metav1.Condition) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return out
}

// readyMembers lists the pool's Ready members.
func (f *fixture) readyMembers(t *testing.T) []kobev1.ClusterInstance {
	t.Helper()
	var list kobev1.ClusterInstanceList
	if err := f.c.List(t.Context(), &list, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelPool: poolName}); err != nil {
		t.Fatal(err)
	}
	var ready []kobev1.ClusterInstance
	for _, m := range list.Items {
		if m.Status.Phase == kobev1.InstanceReady && m.DeletionTimestamp == nil {
			ready = append(ready, m)
		}
	}
	return ready
}

// waitMemberGone waits until the member with uid is gone from the API and
// every host object of it is deleted.
func (f *fixture) waitMemberGone(t *testing.T, name string, uid types.UID) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "member "+name+" and its host objects gone", func() error {
		var m kobev1.ClusterInstance
		err := f.c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, &m)
		if err == nil && m.UID == uid {
			return fmt.Errorf("member %s still there in phase %s", name, m.Status.Phase)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		objs, err := f.hostObjects(t.Context(), kobev1.LabelMemberUID+"="+string(uid))
		if err != nil {
			return err
		}
		if len(objs) > 0 {
			return fmt.Errorf("%w: %v", errStillThere, objs)
		}
		return nil
	})
}

func (f *fixture) leaseAndRelease(t *testing.T) {
	l, kc := f.lease(t, poolName)
	t.Logf("lease %s on %s until %s", l.ID, l.ClusterName, l.ExpiresAt)
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	server := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server
	if want := f.apiURL + "/connect/" + l.ID; server != want {
		t.Fatalf("kubeconfig server = %q, want the connect proxy %q", server, want)
	}
	var member kobev1.ClusterInstance
	if err := f.c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: l.ClusterName}, &member); err != nil {
		t.Fatal(err)
	}

	if out, err := testenv.Kubectl(t, kc, "get", "ns"); err != nil || !strings.Contains(out, "kube-system") {
		t.Fatalf("kubectl get ns through the proxy: %v\n%s", err, out)
	}
	manifest := filepath.Join(f.work, "deploy.yaml")
	if err := os.WriteFile(manifest, []byte(deployment), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Kubectl(t, kc, "apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply through the proxy: %v\n%s", err, out)
	}

	// A watch through the proxy: it prints the Deployment, then its change.
	watch := exec.Command(testenv.KubectlPath(t), "--kubeconfig", kc, "get", "deployment", "web", "-w", "-o", "custom-columns=NAME:.metadata.name,REPLICAS:.spec.replicas", "--no-headers")
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	watch.Stderr = watch.Stdout
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expectLine(t, lines, "web   1", 20*time.Second)
	if out, err := testenv.Kubectl(t, kc, "scale", "deployment", "web", "--replicas", "3"); err != nil {
		t.Fatalf("kubectl scale through the proxy: %v\n%s", err, out)
	}
	expectLine(t, lines, "web   3", 20*time.Second)

	// Release; from then on the kubeconfig must fail at once and the watch
	// must end, whatever the member's teardown is doing. The refusal is
	// timed with client-go polling every 20 ms with the same kubeconfig
	// (a kubectl process per try would time kubectl's start-up instead).
	restCfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	restCfg.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("client-go through the proxy before release: %v", err)
	}
	watchDone := make(chan time.Time, 1)
	go func() { _ = watch.Wait(); watchDone <- time.Now() }()

	released := time.Now()
	if out, errOut, err := f.kobe(t, "release", l.ID); err != nil {
		t.Fatalf("kobe release: %v\n%s%s", err, out, errOut)
	}
	returned := time.Now()
	var refused time.Time
	var refusal error
	for {
		_, err := cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			refused, refusal = time.Now(), err
			break
		}
		if time.Since(returned) > 10*time.Second {
			t.Fatalf("the kubeconfig still works %v after kobe release returned", time.Since(returned))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var watchClosed time.Time
	select {
	case watchClosed = <-watchDone:
	case <-time.After(10 * time.Second):
		t.Fatalf("the watch through the proxy is still open %v after kobe release", time.Since(released))
	}
	t.Logf("kobe release took %v; after it returned, the kubeconfig was refused in %v (%v) and the watch had closed %v after it",
		returned.Sub(released).Round(time.Millisecond), refused.Sub(returned).Round(time.Millisecond), refusal,
		watchClosed.Sub(returned).Round(time.Millisecond))
	if d := refused.Sub(returned); d > time.Second {
		t.Errorf("the kubeconfig was refused %v after kobe release returned, want within 1s", d)
	}
	if d := watchClosed.Sub(returned); d > time.Second {
		t.Errorf("the watch closed %v after kobe release returned, want within 1s", d)
	}
	// kubectl says why: the refusal is a Kubernetes Status.
	if out, err := testenv.Kubectl(t, kc, "get", "ns"); err == nil || !strings.Contains(out, "lease ended") {
		t.Errorf("kubectl get ns after release: err %v, want a refusal saying the lease ended:\n%s", err, out)
	}

	f.waitMemberGone(t, member.Name, member.UID)
	f.waitPoolReady(t, 2)
}

// expectLine waits for a line of the watch to contain want.
func expectLine(t *testing.T, lines <-chan string, want string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	var seen []string
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the watch ended before printing %q; it printed %q", want, seen)
			}
			seen = append(seen, line)
			if strings.Join(strings.Fields(line), "   ") == want {
				return
			}
		case <-deadline:
			t.Fatalf("the watch did not print %q within %v; it printed %q", want, within, seen)
		}
	}
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: kobe.local/echo:v1
`

func (f *fixture) deletedPodRecycles(t *testing.T) {
	members := f.readyMembers(t)
	if len(members) == 0 {
		t.Fatal("no Ready member")
	}
	m := members[0]
	var pods corev1.PodList
	if err := f.c.List(t.Context(), &pods, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelMemberUID: string(m.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("member %s has no pod", m.Name)
	}
	if err := f.c.Delete(t.Context(), &pods.Items[0]); err != nil {
		t.Fatal(err)
	}
	f.waitMemberGone(t, m.Name, m.UID)
	f.waitPoolReady(t, 2)
}

// frozenAPIServerRecycles stops (SIGSTOP) the kube-apiserver process of a
// member's pod on the node: it keeps its socket and answers nothing, so the
// operator's health checks fail and the member is reaped, never repaired.
func (f *fixture) frozenAPIServerRecycles(t *testing.T) {
	members := f.readyMembers(t)
	if len(members) == 0 {
		t.Fatal("no Ready member")
	}
	m := members[0]
	var pods corev1.PodList
	if err := f.c.List(t.Context(), &pods, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelMemberUID: string(m.UID)}); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range pods.Items {
		found, err := processesOfPod(p.UID, "kube-apiserver")
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, found...)
	}
	if len(pids) == 0 {
		t.Fatalf("no kube-apiserver process found for member %s", m.Name)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever happens, nothing stays frozen (a stopped process still dies
	// of SIGKILL, which teardown sends).
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	t.Logf("froze kube-apiserver %v of member %s", pids, m.Name)
	f.waitMemberGone(t, m.Name, m.UID)
	f.waitPoolReady(t, 2)
}

// processesOfPod finds processes named comm in the cgroup of the pod with
// uid (the cgroupfs driver puts them under .../pod<uid>/...).
func processesOfPod(uid types.UID, comm string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(name)) != comm {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cg), "pod"+string(uid)) || strings.Contains(string(cg), "pod"+strings.ReplaceAll(string(uid), "-", "_")) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func (f *fixture) deletePool(t *testing.T) {
	ctx := t.Context()
	if err := f.c.Delete(ctx, &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: poolName, Namespace: namespace}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "the pool, its members and every host object with kobe's labels gone", func() error {
		var p kobev1.ClusterPool
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: poolName}, &p); err == nil {
			return fmt.Errorf("pool still there: phase %s, %d members", p.Status.Phase, len(p.Status.Conditions))
		} else if !apierrors.IsNotFound(err) {
			return err
		}
		objs, err := f.hostObjects(ctx, kobev1.LabelMemberUID)
		if err != nil {
			return err
		}
		if len(objs) > 0 {
			return fmt.Errorf("%w: %v", errStillThere, objs)
		}
		return nil
	})
}
