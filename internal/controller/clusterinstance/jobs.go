package clusterinstance

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/bootstrap"
	"github.com/kunobi-ninja/kobe/internal/pool"
)

// jobBundle is a BootstrapConfig of the member's that runs a Job, with the
// values of its references.
type jobBundle struct {
	bc   *kobev1.BootstrapConfig
	vals bootstrap.Values
}

// jobVerdict is where a member's Job bundles stand.
type jobVerdict struct {
	// done: every Job completed.
	done bool
	// waiting says which Job runs (when not done and not failed).
	waiting string
	// failed says which Job failed and why; the member fails.
	failed string
}

// runJobs runs the member's Job bundles one after another, in the pool's
// order: each Job (and the Secret with the member's kubeconfig it mounts)
// is created when missing and read live, so the Jobs themselves are the
// record of where the member stands across restarts and replicas.
func (r *Reconciler) runJobs(ctx context.Context, s *scope, jobs []jobBundle) (jobVerdict, error) {
	if len(jobs) == 0 {
		return jobVerdict{done: true}, nil
	}
	kubeconfig, err := r.adminKubeconfig(ctx, s)
	if err != nil {
		return jobVerdict{}, err
	}
	m := bootstrap.JobMember{UID: s.inst.UID, Kubeconfig: kubeconfig,
		Member: bootstrap.Member{Name: s.inst.Name, Namespace: s.inst.Namespace, Pool: s.inst.Spec.PoolRef.Name}}
	for _, jb := range jobs {
		job, secret, err := bootstrap.RenderJob(jb.bc, pool.BundleDigest(jb.bc), m, jb.vals)
		if err != nil {
			return jobVerdict{failed: "bootstrap " + err.Error()}, nil
		}
		got := &batchv1.Job{}
		err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: job.Namespace, Name: job.Name}, got)
		switch {
		case apierrors.IsNotFound(err):
			if err := r.createJob(ctx, job, secret); err != nil {
				return jobVerdict{}, err
			}
			return jobVerdict{waiting: fmt.Sprintf("started Job %s of BootstrapConfig %s", job.Name, jb.bc.Name)}, nil
		case err != nil:
			return jobVerdict{}, fmt.Errorf("reading bootstrap Job %s: %w", job.Name, err)
		}
		done, failure := bootstrap.JobOutcome(got)
		switch {
		case failure != "":
			return jobVerdict{failed: fmt.Sprintf("bootstrap %s: Job %s failed: %s", jb.bc.Name, job.Name, failure)}, nil
		case !done:
			return jobVerdict{waiting: fmt.Sprintf("Job %s of BootstrapConfig %s is running", job.Name, jb.bc.Name)}, nil
		}
	}
	return jobVerdict{done: true}, nil
}

// createJob writes the kubeconfig Secret, then the Job that mounts it.
func (r *Reconciler) createJob(ctx context.Context, job *batchv1.Job, secret *corev1.Secret) error {
	if err := r.Client.Create(ctx, secret); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the kubeconfig Secret of bootstrap Job %s: %w", job.Name, err)
		}
		if err := r.Client.Update(ctx, secret); err != nil {
			return fmt.Errorf("updating the kubeconfig Secret of bootstrap Job %s: %w", job.Name, err)
		}
	}
	if err := r.Client.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating bootstrap Job %s: %w", job.Name, err)
	}
	return nil
}

// deleteJobs deletes every bootstrap Job of the member and the Secrets
// holding its kubeconfig: once the bootstraps completed (nothing should
// keep an admin credential of the member around) and when the member is
// destroyed. It runs whether or not this operator runs Jobs: an earlier one
// may have, and the Secrets hold the member's admin kubeconfig. (The member
// owns them too, for when its finalizer is removed by hand.) Only a
// kubernetes member can have any (bootstrap.JobsRefusal, so since Jobs
// came): for the others nothing is listed, which spares the host API server
// two lists for each member destroyed.
func (r *Reconciler) deleteJobs(ctx context.Context, s *scope) error {
	if t := s.inst.Spec.Backend.Type; t != "" && t != kobev1.BackendKubernetes {
		return nil
	}
	sel := client.MatchingLabels{kobev1.LabelMemberUID: string(s.inst.UID)}
	has := client.HasLabels{kobev1.LabelBootstrap}
	var jobs batchv1.JobList
	if err := r.APIReader.List(ctx, &jobs, client.InNamespace(s.inst.Namespace), sel, has); err != nil {
		return fmt.Errorf("listing the bootstrap Jobs of %s: %w", s.inst.Name, err)
	}
	for i := range jobs.Items {
		err := r.Client.Delete(ctx, &jobs.Items[i], client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting bootstrap Job %s: %w", jobs.Items[i].Name, err)
		}
	}
	var secrets corev1.SecretList
	if err := r.APIReader.List(ctx, &secrets, client.InNamespace(s.inst.Namespace), sel, has); err != nil {
		return fmt.Errorf("listing the bootstrap Secrets of %s: %w", s.inst.Name, err)
	}
	for i := range secrets.Items {
		if err := r.Client.Delete(ctx, &secrets.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting bootstrap Secret %s: %w", secrets.Items[i].Name, err)
		}
	}
	return nil
}
