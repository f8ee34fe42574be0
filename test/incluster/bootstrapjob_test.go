//go:build root

package incluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// bootstrapJobs: a pool whose bundle runs a Job (testapp, which creates a
// ConfigMap in the member with the kubeconfig kobe mounted) gets members
// that already hold what the Job made, with the pool's parameter and the
// pool's name in it; the Job and its kubeconfig Secret are gone once the
// member is Ready. A bundle whose Job fails fails its members, and the
// pool names the Job.
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
	objs := []client.Object{
		// $(params.branch) is kobe's substitution; $(KOBE_POOL) Kubernetes'
		// expansion of the container's environment.
		job("sync", "configmap", "bootstrapped", "branch=$(params.branch)", "pool=$(KOBE_POOL)"),
		job("broken", "fail", "chart not found"),
		pool("jobs", "sync", map[string]string{"branch": "release-2"}),
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
	if out, errOut, err := f.kobe(t, "release", l.ID); err != nil {
		t.Errorf("kobe release: %v\n%s\n%s", err, out, errOut)
	}

	// The Job and the Secret with the member's admin kubeconfig are gone
	// once the member is Ready.
	var jobs batchv1.JobList
	var secrets corev1.SecretList
	if err := f.c.List(ctx, &jobs, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelBootstrap: "sync"}); err != nil {
		t.Fatal(err)
	}
	if err := f.c.List(ctx, &secrets, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelBootstrap: "sync"}); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.DeletionTimestamp.IsZero() {
			t.Errorf("bootstrap Job %s of a Ready member left behind", j.Name)
		}
	}
	if len(secrets.Items) > 0 {
		t.Errorf("%d kubeconfig Secrets of bootstrap Jobs left behind", len(secrets.Items))
	}

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
