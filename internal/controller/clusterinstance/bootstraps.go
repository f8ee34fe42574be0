package clusterinstance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/bootstrap"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
)

// bootstrapWait is how soon a member waiting for a CRD of its bundles to be
// served is tried again.
const bootstrapWait = time.Second

// applyBootstraps applies the pool's BootstrapConfigs to a Provisioned
// member, before its readiness gates: a member is never Ready half-built.
// The member's BootstrapsComplete condition records that they are applied;
// until then every reconcile applies them again (server-side apply changes
// nothing the second time), so nothing is kept in memory. A bundle that can
// never apply fails the member, which is destroyed and replaced (the pool
// counts it, with the reason). done is false while the member must wait.
func (r *Reconciler) applyBootstraps(ctx context.Context, s *scope, left time.Duration) (res ctrl.Result, done bool, err error) {
	refs := s.settings.bootstraps
	if len(refs) == 0 || meta.IsStatusConditionTrue(s.inst.Status.Conditions, kobev1.ConditionBootstrapsComplete) {
		if len(refs) == 0 && (kobev1.HasGate(s.settings.gates, kobev1.GateBootstrapsComplete) || kobev1.HasGate(s.settings.gates, kobev1.GateAddonsReady)) {
			r.setCondition(s, kobev1.ConditionBootstrapsComplete, metav1.ConditionTrue, kobev1.ReasonBootstrapsApplied, "the pool names no BootstrapConfigs")
		}
		return ctrl.Result{}, true, nil
	}
	names := make([]string, len(refs))
	for i, ref := range refs {
		names[i] = ref.Name
	}
	if s.simulated() {
		r.setCondition(s, kobev1.ConditionBootstrapsComplete, metav1.ConditionTrue, kobev1.ReasonBootstrapsApplied,
			"simulated member: BootstrapConfigs "+strings.Join(names, ", ")+" not applied")
		return ctrl.Result{}, true, nil
	}
	fail := func(msg string) (ctrl.Result, bool, error) {
		r.setCondition(s, kobev1.ConditionBootstrapsComplete, metav1.ConditionFalse, kobev1.ReasonBootstrapFailed, msg)
		res, err := r.recycle(ctx, s, kobev1.ReasonBootstrapFailed, msg)
		return res, false, err
	}
	wait := func(msg string, after time.Duration) (ctrl.Result, bool, error) {
		r.setCondition(s, kobev1.ConditionBootstrapsComplete, metav1.ConditionFalse, kobev1.ReasonBootstrapsApplying, msg)
		return ctrl.Result{RequeueAfter: min(after, left)}, false, nil
	}

	var objs []bootstrap.Object
	var jobs []jobBundle
	for _, ref := range refs {
		bc := &kobev1.BootstrapConfig{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.inst.Namespace, Name: ref.Name}, bc)
		if apierrors.IsNotFound(err) {
			return wait(fmt.Sprintf("BootstrapConfig %s does not exist in namespace %s; the member waits for it until creatingTimeout", ref.Name, s.inst.Namespace), r.pollInterval())
		}
		if err != nil {
			return ctrl.Result{}, false, fmt.Errorf("reading BootstrapConfig %s: %w", ref.Name, err)
		}
		vals, err := bootstrap.Resolve(bc, ref, bootstrap.Member{Name: s.inst.Name, Namespace: s.inst.Namespace, Pool: s.inst.Spec.PoolRef.Name})
		if err != nil {
			return fail("bootstrap " + err.Error())
		}
		if bc.Spec.Job != nil {
			if bootstrap.JobsRefusal(r.BootstrapJobs, s.inst.Spec.Backend.Type) != "" {
				return fail(fmt.Sprintf("BootstrapConfig %s runs a Job, which this operator cannot run for a %s member (its pool says why)", ref.Name, s.inst.Spec.Backend.Type))
			}
			jobs = append(jobs, jobBundle{bc: bc, vals: vals})
			continue
		}
		docs, err := bootstrap.Documents(bc, vals)
		if err != nil {
			return fail("bootstrap " + err.Error())
		}
		objs = append(objs, docs...)
	}

	if len(objs) > 0 {
		kubeconfig, err := r.adminKubeconfig(ctx, s)
		if err != nil {
			return ctrl.Result{}, false, err
		}
		cfg, err := memberaccess.RESTConfig(kubeconfig, max(r.probeTimeout(s), 10*time.Second), "bootstrap")
		if err != nil {
			return ctrl.Result{}, false, fmt.Errorf("applying the bootstraps of %s: %w", s.inst.Name, err)
		}
		err = bootstrap.Apply(ctx, cfg, objs)
		var invalid *bootstrap.InvalidError
		switch {
		case errors.As(err, &invalid):
			return fail("bootstrap " + invalid.Error())
		case errors.Is(err, bootstrap.ErrWaiting):
			return wait(err.Error(), bootstrapWait)
		case err != nil:
			r.setCondition(s, kobev1.ConditionBootstrapsComplete, metav1.ConditionFalse, kobev1.ReasonBootstrapsApplying, err.Error())
			return ctrl.Result{}, false, fmt.Errorf("applying the bootstraps of %s: %w", s.inst.Name, err)
		}
	}
	// Jobs run after every bundle of manifests: the tooling they run
	// usually needs the CRDs and namespaces those bring.
	verdict, err := r.runJobs(ctx, s, jobs)
	switch {
	case err != nil:
		return ctrl.Result{}, false, err
	case verdict.failed != "":
		return fail(verdict.failed)
	case !verdict.done:
		return wait(verdict.waiting, r.pollInterval())
	}
	msg := fmt.Sprintf("applied %d objects of BootstrapConfigs %s", len(objs), strings.Join(names, ", "))
	if len(jobs) == 0 {
		r.setCondition(s, kobev1.ConditionBootstrapsComplete, metav1.ConditionTrue, kobev1.ReasonBootstrapsApplied, msg)
		return ctrl.Result{}, true, nil
	}
	msg = fmt.Sprintf("applied %d objects and ran %d Jobs of BootstrapConfigs %s", len(objs), len(jobs), strings.Join(names, ", "))
	r.setCondition(s, kobev1.ConditionBootstrapsComplete, metav1.ConditionTrue, kobev1.ReasonBootstrapsApplied, msg)
	// The condition is the record that the Jobs ran: it is written before
	// they are deleted, or a failed write would run them again.
	if err := s.patch.Status(ctx); err != nil || s.patch.Done() {
		return ctrl.Result{}, false, err
	}
	if err := r.deleteJobs(ctx, s); err != nil {
		// The member's destruction deletes them too.
		s.log.Error(err, "Bootstrap Jobs not deleted")
	}
	return ctrl.Result{}, true, nil
}
