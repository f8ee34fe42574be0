//go:build integration

package clusterinstance

import (
	"fmt"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/pool"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// kubernetesFake is the fake backend as the kubernetes backend, the only
// one whose members run bootstrap Jobs.
type kubernetesFake struct{ *fakeBackend }

func (kubernetesFake) Type() kobev1.BackendType { return kobev1.BackendKubernetes }

// TestBootstrapJobsOwnedAndCleanedWithoutTheFlag: a bootstrap Job and the
// Secret with the member's admin kubeconfig that it mounts are owned by the
// member (so the garbage collector removes them should no operator), and
// an operator restarted without --bootstrap-jobs still deletes them with
// the member.
func TestBootstrapJobsOwnedAndCleanedWithoutTheFlag(t *testing.T) {
	env := testenv.Shared(t)
	ctx := t.Context()
	c := env.Client
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	fake := newFake(kubeconfig, env.Config.Host)
	ns := env.NewNamespace(t)
	// run starts an instance controller, with or without bootstrap Jobs.
	run := func(jobs bool) (stop func() error) {
		t.Helper()
		mgr := env.NewManager(t, ns)
		if err := index.Setup(ctx, mgr); err != nil {
			t.Fatal(err)
		}
		r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(ControllerName), Access: accesstest.Sealer(),
			Clock: clock.RealClock{}, Backends: backend.Registry{kobev1.BackendKubernetes: kubernetesFake{fake}},
			PollInterval: 200 * time.Millisecond, BootstrapJobs: jobs}
		if err := r.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		setupPoolCounter(t, mgr) // the recycled member waits for its count
		stop, err := testenv.RunManager(mgr)
		if err != nil {
			t.Fatal(err)
		}
		return stop
	}

	bc := &kobev1.BootstrapConfig{ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: ns},
		Spec: kobev1.BootstrapConfigSpec{Job: &kobev1.BootstrapJob{Image: "tools:1", Args: []string{"install"}}}}
	p := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
		Spec: kobev1.ClusterPoolSpec{Size: ptr.To[int32](0), Backend: kobev1.BackendSpec{Type: kobev1.BackendKubernetes},
			Bootstraps: []kobev1.BootstrapRef{{Name: bc.Name}}}}
	for _, o := range []client.Object{bc, p} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	m := pool.NewMember(p, 0, pool.TemplateHash(&p.Spec))
	m.Finalizers = nil // the instance controller adds it
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}

	// listed reads the member's bootstrap Jobs and Secrets.
	byMember := client.MatchingLabels{kobev1.LabelMemberUID: string(m.UID)}
	listed := func() ([]batchv1.Job, []corev1.Secret) {
		t.Helper()
		var jobs batchv1.JobList
		var secrets corev1.SecretList
		if err := c.List(ctx, &jobs, client.InNamespace(ns), byMember, client.HasLabels{kobev1.LabelBootstrap}); err != nil {
			t.Fatal(err)
		}
		if err := c.List(ctx, &secrets, client.InNamespace(ns), byMember, client.HasLabels{kobev1.LabelBootstrap}); err != nil {
			t.Fatal(err)
		}
		return jobs.Items, secrets.Items
	}

	stop := run(true)
	var jobs []batchv1.Job
	var secrets []corev1.Secret
	testenv.Eventually(t, 30*time.Second, "the member's bootstrap Job and Secret", func() error {
		jobs, secrets = listed()
		if len(jobs) != 1 || len(secrets) != 1 {
			return fmt.Errorf("%d Jobs, %d Secrets", len(jobs), len(secrets))
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []metav1.Object{&jobs[0], &secrets[0]} {
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].Kind != "ClusterInstance" || refs[0].APIVersion != kobev1.GroupVersion.String() ||
			refs[0].Name != m.Name || refs[0].UID != m.UID || !ptr.Deref(refs[0].Controller, false) {
			t.Errorf("%T %s has owner references %+v, want the member %s (%s) as controller", obj, obj.GetName(), refs, m.Name, m.UID)
		}
	}

	// The operator comes back without --bootstrap-jobs: the member, whose
	// bundle it cannot run, is recycled; its Job and Secret go with it.
	stop = run(false)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	testenv.Eventually(t, 30*time.Second, "the member gone with its bootstrap Job and Secret", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(m), &kobev1.ClusterInstance{})
		if err == nil {
			return fmt.Errorf("member %s still exists", m.Name)
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if jobs, secrets := listed(); len(jobs)+len(secrets) > 0 {
			return fmt.Errorf("member gone, %d bootstrap Jobs and %d Secrets left", len(jobs), len(secrets))
		}
		return nil
	})
}
