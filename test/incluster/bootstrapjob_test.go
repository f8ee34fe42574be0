//go:build root

package incluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// bootstrapJobs: a pool whose bundle runs a Job (testapp, which creates a
// ConfigMap in the member with the kubeconfig kobe mounted) gets members
// that already hold what the Job made, with the pool's parameter and the
// pool's name in it; the Job and its kubeconfig Secret are gone once the
// member is Ready. A bundle whose Job fails fails its members, and the
// pool names the Job. The first pool's access is Direct (the kubeconfig
// names the member's Service, which the host machine reaches): after
// DELETE /v1/leases/{id} answers, the lease's certificate and a token
// minted inside the member stop working within 2 s, also with a kubelet
// slow to stop the member's pods (releaseCutsDirectCredentials).
func (f *fixture) bootstrapJobs(t *testing.T) {
	ctx := t.Context()
	job := func(name string, args ...string) *kobev1.BootstrapConfig {
		return &kobev1.BootstrapConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: kobev1.BootstrapConfigSpec{
				Job:        &kobev1.BootstrapJob{Image: "kobe.local/testapp:v1", Args: args, Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
				Parameters: []kobev1.BootstrapParameter{{Name: "branch", Default: ptr.To("main")}},
			}}
	}
	pool := func(name, bundle string, params map[string]string) *kobev1.ClusterPool {
		return &kobev1.ClusterPool{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: kobev1.ClusterPoolSpec{
				Size: ptr.To[int32](1),
				TTL:  &metav1.Duration{Duration: 30 * time.Minute},
				Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes, Kubernetes: &kobev1.KubernetesBackendSpec{
					Images: &kobev1.KubernetesImages{PullPolicy: corev1.PullNever},
				}},
				Access:     &kobev1.AccessSpec{Mode: kobev1.AccessProxy},
				Bootstraps: []kobev1.BootstrapRef{{Name: bundle, Parameters: params}},
			},
		}
	}
	direct := pool("jobs", "sync", map[string]string{"branch": "release-2"})
	direct.Spec.Access.Mode = kobev1.AccessDirect
	objs := []client.Object{
		// $(params.branch) is kobe's substitution; $(KOBE_POOL) Kubernetes'
		// expansion of the container's environment.
		job("sync", "configmap", "bootstrapped", "branch=$(params.branch)", "pool=$(KOBE_POOL)"),
		job("broken", "fail", "chart not found"),
		direct,
		pool("jobs-broken", "broken", nil),
	}
	for _, o := range objs {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}

	testenv.Eventually(t, memberDeadline, "pool jobs READY 1", func() error {
		var p kobev1.ClusterPool
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "jobs"}, &p); err != nil {
			return err
		}
		if p.Status.Ready < 1 {
			return fmt.Errorf("phase %s, %d Ready; conditions %v", p.Status.Phase, p.Status.Ready, conditionSummary(p.Status.Conditions))
		}
		return nil
	})
	l, kc := f.lease(t, "jobs")
	out, err := testenv.Kubectl(t, kc, "-n", "default", "get", "configmap", "bootstrapped", "-o", "jsonpath={.data.branch} {.data.pool}")
	if err != nil || strings.TrimSpace(out) != "release-2 jobs" {
		t.Errorf("the Job's ConfigMap in the leased member: %q, %v; want the pool's parameter and name", out, err)
	}
	// The Job and the Secret with the member's admin kubeconfig are gone
	// once the member is Ready. Only the leased member's: its replacement,
	// built from the bind on, may be running its own Job right now.
	var member kobev1.ClusterInstance
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: l.ClusterName}, &member); err != nil {
		t.Fatalf("reading member %s of lease %s: %v", l.ClusterName, l.ID, err)
	}
	ofMember := client.MatchingLabels{kobev1.LabelBootstrap: "sync", kobev1.LabelMemberUID: string(member.UID)}
	var jobs batchv1.JobList
	var secrets corev1.SecretList
	if err := f.c.List(ctx, &jobs, client.InNamespace(namespace), ofMember); err != nil {
		t.Fatal(err)
	}
	if err := f.c.List(ctx, &secrets, client.InNamespace(namespace), ofMember); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.DeletionTimestamp.IsZero() {
			t.Errorf("bootstrap Job %s of Ready member %s left behind", j.Name, member.Name)
		}
	}
	if len(secrets.Items) > 0 {
		t.Errorf("%d kubeconfig Secrets of the bootstrap Jobs of Ready member %s left behind", len(secrets.Items), member.Name)
	}
	f.releaseCutsDirectCredentials(t, l, kc)

	testenv.Eventually(t, memberDeadline, "pool jobs-broken to name the failed Job", func() error {
		var p kobev1.ClusterPool
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "jobs-broken"}, &p); err != nil {
			return err
		}
		if p.Status.Ready > 0 {
			t.Fatalf("a member whose bootstrap Job failed became Ready")
		}
		lf := p.Status.LastFailure
		if lf == nil || lf.Reason != kobev1.ReasonBootstrapFailed || !strings.Contains(lf.Message, "bootstrap broken: Job kobe-boot-") || !strings.Contains(lf.Message, "failed") {
			return fmt.Errorf("lastFailure %+v", lf)
		}
		return nil
	})

	for _, name := range []string{"jobs", "jobs-broken"} {
		if err := f.c.Delete(ctx, &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 2*time.Minute, "the Job pools gone with their Jobs", func() error {
		for _, name := range []string{"jobs", "jobs-broken"} {
			err := f.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &kobev1.ClusterPool{})
			switch {
			case err == nil:
				return fmt.Errorf("pool %s still there", name)
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("reading pool %s: %w", name, err)
			}
		}
		objs, err := f.hostObjects(ctx, kobev1.LabelBootstrap)
		if err != nil {
			return err
		}
		if len(objs) > 0 {
			return fmt.Errorf("bootstrap objects left: %v", objs)
		}
		return nil
	})
}

// releaseCutsDirectCredentials: a Direct lease's certificate and a token
// minted inside its member with it (`kubectl create token`) stop working
// within testenv.CredentialCut of DELETE /v1/leases/{id}'s answer, also on
// a node whose kubelet is slow to act: the host's kubelet is frozen for
// kubeletLag from just before the DELETE (a loaded machine took 2.9 s to
// stop a deleted API server). The answering replica fences the member
// before it answers: it deletes its pods and waits until the API server,
// the only judge of both credentials, no longer answers.
func (f *fixture) releaseCutsDirectCredentials(t *testing.T, l wire.Lease, kc string) {
	const kubeletLag = 2500 * time.Millisecond
	if b, err := os.ReadFile(kc); err != nil || strings.Contains(string(b), "/connect/") {
		t.Fatalf("the kubeconfig of lease %s of a Direct pool (%v) points at the connect proxy:\n%s", l.ID, err, b)
	}
	holder := testenv.KeepCredentials(t, kc)
	api, err := apiclient.New(f.apiURL, apiclient.BearerToken(f.token), apiclient.WithCAFile(f.caFile))
	if err != nil {
		t.Fatal(err)
	}
	f.freezeKubelet(t, kubeletLag)
	start := time.Now()
	if err := api.ReleaseLease(t.Context(), l.ID); err != nil {
		t.Fatalf("DELETE /v1/leases/%s: %v", l.ID, err)
	}
	answered := time.Now()
	t.Logf("DELETE answered in %v (the kubelet frozen for %v)", answered.Sub(start).Round(time.Millisecond), kubeletLag)
	holder.WaitCut(t, answered, "DELETE's answer", func() string { return "operator (tail):\n" + f.op.Tail(4000) })
}

// freezeKubelet stops the host cluster's kubelet (SIGSTOP) for d: it then
// acts on nothing, as a kubelet of a busy node acts late.
func (f *fixture) freezeKubelet(t *testing.T, d time.Duration) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.hc.Dir, "pids", "kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thaw := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(thaw) // whatever happens, nothing stays frozen
	time.AfterFunc(d, thaw)
}
