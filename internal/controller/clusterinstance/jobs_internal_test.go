package clusterinstance

import (
	"cmp"
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestDeleteJobsListsOnlyWhereJobsCanBe: a destroyed member's bootstrap Jobs
// and their Secrets are looked for, and deleted, for a kubernetes member (and
// one whose type was left to the default), never for the other backends,
// whose members cannot have any: two lists of the host API server saved per
// member destroyed.
func TestDeleteJobsListsOnlyWhereJobsCanBe(t *testing.T) {
	for _, tc := range []struct {
		backend kobev1.BackendType
		lists   int
		deleted bool
	}{
		{kobev1.BackendKubernetes, 2, true},
		{"", 2, true},
		{kobev1.BackendLocal, 0, false},
		{kobev1.BackendSim, 0, false},
	} {
		t.Run(cmp.Or(string(tc.backend), "type left to the default"), func(t *testing.T) {
			inst := &kobev1.ClusterInstance{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", UID: "uid-m"},
				Spec:       kobev1.ClusterInstanceSpec{Backend: kobev1.BackendSpec{Type: tc.backend}},
			}
			labels := map[string]string{kobev1.LabelMemberUID: "uid-m", kobev1.LabelBootstrap: "helm"}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kobe-boot-1", Labels: labels}}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kobe-boot-1", Labels: labels}}
			lists := 0
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(job, secret).
				WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
					lists++
					return c.List(ctx, l, opts...)
				}}).Build()
			r := &Reconciler{Client: c, APIReader: c}
			if err := r.deleteJobs(t.Context(), &scope{inst: inst}); err != nil {
				t.Fatal(err)
			}
			if lists != tc.lists {
				t.Errorf("%d lists of the host API server, want %d", lists, tc.lists)
			}
			var jobs batchv1.JobList
			var secrets corev1.SecretList
			if err := c.List(t.Context(), &jobs); err != nil {
				t.Fatal(err)
			}
			if err := c.List(t.Context(), &secrets); err != nil {
				t.Fatal(err)
			}
			if gone := len(jobs.Items) == 0 && len(secrets.Items) == 0; gone != tc.deleted {
				t.Errorf("Job and Secret deleted: %v, want %v (%d Jobs, %d Secrets left)", gone, tc.deleted, len(jobs.Items), len(secrets.Items))
			}
		})
	}
}
