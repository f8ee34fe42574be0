package clusterinstance

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/cleanup"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/truncate"
)

// Kinds of the checks the controller adds to a backend's: the lease's
// credentials must be unusable, not only the member gone.
const (
	checkAccessMaterial = "AccessMaterial"
	checkLeaseRoute     = "LeaseRoute"
)

// destroyGrace is how long a verified teardown waits for a backend that
// reports the member not gone yet (processes still stopping) before the
// member is Quarantined and retried on the backoff.
const destroyGrace = 2 * time.Minute

// verifiedTeardown reports whether inst was bound with cleanupMode
// VerifiedDestroy: its teardown must be proven.
func verifiedTeardown(inst *kobev1.ClusterInstance) bool {
	return inst.Spec.LeaseRef != nil && inst.Spec.LeaseRef.CleanupMode == kobev1.CleanupVerifiedDestroy
}

// recordManifest records, once, what the backend made for the member, so
// that a VerifiedDestroy teardown can prove each piece absent.
func (r *Reconciler) recordManifest(ctx context.Context, s *scope) error {
	v, ok := s.backend.(backend.Verifier)
	if !ok || s.inst.Status.CreationManifest != nil {
		return nil
	}
	res, err := v.Manifest(ctx, s.member())
	if err != nil {
		return fmt.Errorf("recording the creation manifest of %s: %w", s.inst.Name, err)
	}
	s.inst.Status.CreationManifest = &kobev1.CreationManifest{RecordedAt: metav1.NewTime(s.now), Resources: res}
	return nil
}

// finalizeVerified destroys a VerifiedDestroy member and proves it: each
// resource of its creation manifest absent, its access Secret (the client
// CA key) gone, its lease no longer served. The receipt is written at every
// attempt; a proof removes the finalizer, anything less Quarantines the
// member, retried on a backoff or at once on request.
func (r *Reconciler) finalizeVerified(ctx context.Context, s *scope) (ctrl.Result, error) {
	retryRequest := ""
	if s.inst.Status.Phase == kobev1.InstanceQuarantined {
		wait, req := cleanup.RetryWait(s.inst, s.now)
		if wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		retryRequest = req
	}
	gone, delErr := s.backend.Delete(ctx, s.member())
	if delErr == nil && !gone && s.inst.Status.Phase != kobev1.InstanceQuarantined &&
		s.now.Sub(phaseSince(s.inst)) < destroyGrace {
		return ctrl.Result{RequeueAfter: r.pollInterval()}, nil
	}
	// The client CA key is in the access material: it goes now, whatever
	// the backend managed, before the proof reads it gone.
	if err := r.dropAccess(ctx, s); err != nil || s.patch.Done() {
		return ctrl.Result{}, err
	}
	attempt := cleanup.Attempt{Gone: gone, DeleteError: delErr, Now: s.now, Number: 1}
	if st := s.inst.Status.Cleanup; st != nil {
		attempt.Number = st.Attempts + 1
	}
	if v, ok := s.backend.(backend.Verifier); !ok {
		attempt.VerifyError = fmt.Errorf("backend %q cannot prove a member absent", s.inst.Spec.Backend.Type)
	} else {
		var manifest []kobev1.ManifestResource
		if m := s.inst.Status.CreationManifest; m != nil {
			manifest = m.Resources
		}
		attempt.Checks, attempt.VerifyError = v.Verify(ctx, s.member(), manifest)
	}
	creds, err := r.credentialChecks(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	attempt.Checks = append(attempt.Checks, creds...)
	receipt := cleanup.NewReceipt(s.inst, attempt)
	name, err := r.writeReceipt(ctx, s, receipt)
	if err != nil {
		return ctrl.Result{}, err
	}
	st := s.inst.Status.Cleanup
	if st == nil {
		st = &kobev1.CleanupStatus{}
		s.inst.Status.Cleanup = st
	}
	last := metav1.NewTime(s.now)
	st.LastAttempt, st.Receipt, st.Message = &last, name, truncate.UTF8(receipt.Summary(), maxCleanupMessage)
	if retryRequest != "" {
		st.RetryRequest = retryRequest
	}
	if receipt.Verified {
		st.Verified, st.NextAttempt = true, nil
		r.setCondition(s, kobev1.ConditionReady, metav1.ConditionFalse, kobev1.ReasonCleanupVerified, receipt.Summary())
		s.log.Info("Cleanup verified", "summary", receipt.Summary(), "receipt", name)
		if err := r.noteLease(ctx, s, name, false); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, s.patch.RemoveFinalizer(ctx, kobev1.FinalizerInstance)
	}
	st.Attempts = attempt.Number
	wait := cleanup.Backoff(st.Attempts)
	next := metav1.NewTime(s.now.Add(wait))
	st.NextAttempt = &next
	msg := fmt.Sprintf("cleanup not proven (attempt %d, next in %s; receipt in ConfigMap %s): %s", st.Attempts, wait, name, receipt.Summary())
	if s.inst.Status.Phase == kobev1.InstanceQuarantined {
		r.setCondition(s, kobev1.ConditionReady, metav1.ConditionFalse, kobev1.ReasonCleanupUnproven, msg)
		r.event(s, corev1.EventTypeWarning, kobev1.ReasonCleanupUnproven, "Destroy", msg)
	} else {
		r.setPhase(s, kobev1.InstanceQuarantined, kobev1.ReasonCleanupUnproven, msg)
	}
	s.log.Info("Member quarantined: cleanup not proven", "attempt", st.Attempts, "receipt", name, "retryIn", wait.String())
	if err := r.noteLease(ctx, s, name, true); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}

// phaseSince is when the member entered its phase.
func phaseSince(inst *kobev1.ClusterInstance) time.Time {
	if t := inst.Status.LastPhaseChange; t != nil {
		return t.Time
	}
	return inst.CreationTimestamp.Time
}

// dropAccess removes the member's access material (the client CA key, the
// admin kubeconfig): its sealed copy in status.access, written at once, and
// a legacy access Secret.
func (r *Reconciler) dropAccess(ctx context.Context, s *scope) error {
	if s.inst.Status.AccessSecretRef != nil {
		if err := r.deleteLegacySecret(ctx, s.inst); err != nil {
			return err
		}
	}
	if s.inst.Status.Access == nil && s.inst.Status.AccessSecretRef == nil {
		return nil
	}
	s.inst.Status.Access, s.inst.Status.AccessSecretRef = nil, nil
	return s.patch.Status(ctx)
}

// credentialChecks prove the lease's credentials unusable beyond the
// member's own: the access material (client CA key, admin kubeconfig) is
// gone, and the lease is no longer served (the connect proxy and the
// kubeconfig endpoint serve a Bound lease only). Both read live.
func (r *Reconciler) credentialChecks(ctx context.Context, s *scope) ([]backend.Check, error) {
	material, err := r.accessMaterialCheck(ctx, s)
	if err != nil {
		return nil, err
	}
	out := []backend.Check{material}
	ref := s.inst.Spec.LeaseRef
	if ref == nil {
		return out, nil
	}
	route := backend.Check{ManifestResource: kobev1.ManifestResource{Kind: checkLeaseRoute, Name: s.inst.Namespace + "/" + ref.Name, ID: string(ref.UID)}}
	l := &kobev1.ClusterLease{}
	err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.inst.Namespace, Name: ref.Name}, l)
	switch {
	case apierrors.IsNotFound(err):
		route.Absent, route.Detail = true, "the lease is deleted"
	case err != nil:
		return nil, fmt.Errorf("reading lease %s: %w", ref.Name, err)
	case ref.UID != "" && l.UID != ref.UID:
		route.Absent, route.Detail = true, "the lease was deleted (a lease of that name has another UID)"
	case lease.IsEnded(l.Status.Phase):
		route.Absent, route.Detail = true, fmt.Sprintf("the lease is %s: no kubeconfig is minted and no connect route served for it", l.Status.Phase)
	case !l.DeletionTimestamp.IsZero():
		route.Absent, route.Detail = true, "the lease is being deleted: no kubeconfig is minted and no connect route served for it"
	default:
		route.Detail = fmt.Sprintf("the lease is %s", l.Status.Phase)
	}
	return append(out, route), nil
}

// writeReceipt creates or replaces the member's receipt ConfigMap.
func (r *Reconciler) writeReceipt(ctx context.Context, s *scope, rec cleanup.Receipt) (string, error) {
	cm, err := cleanup.ConfigMap(s.inst, rec, s.now.Add(r.receiptRetention()))
	if err != nil {
		return "", err
	}
	err = r.Client.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got := &corev1.ConfigMap{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
				return err
			}
			got.Labels, got.Annotations, got.Data = cm.Labels, cm.Annotations, cm.Data
			return r.Client.Update(ctx, got)
		})
	}
	if err != nil {
		return "", fmt.Errorf("writing cleanup receipt %s: %w", cm.Name, err)
	}
	return cm.Name, nil
}

func (r *Reconciler) receiptRetention() time.Duration {
	if r.ReceiptRetention > 0 {
		return r.ReceiptRetention
	}
	return cleanup.DefaultRetention
}

// noteLease points the member's lease at the receipt and, when the proof
// failed, moves the ended lease to Quarantined. A lease that is gone (or
// re-created) is left alone: the receipt names it.
func (r *Reconciler) noteLease(ctx context.Context, s *scope, receipt string, quarantined bool) error {
	ref := s.inst.Spec.LeaseRef
	if ref == nil {
		return nil
	}
	key := types.NamespacedName{Namespace: s.inst.Namespace, Name: ref.Name}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := &kobev1.ClusterLease{}
		if err := r.APIReader.Get(ctx, key, l); err != nil {
			return err
		}
		if ref.UID != "" && l.UID != ref.UID {
			return nil
		}
		before := l.DeepCopy()
		l.Status.CleanupReceipt = &kobev1.LocalRef{Name: receipt}
		if quarantined && lease.IsEnded(l.Status.Phase) {
			l.Status.Phase = kobev1.LeaseQuarantined
		}
		if equalLeaseStatus(before, l) {
			return nil
		}
		return r.Client.Status().Patch(ctx, l, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recording the cleanup receipt on lease %s: %w", ref.Name, err)
	}
	return nil
}

func equalLeaseStatus(a, b *kobev1.ClusterLease) bool {
	return a.Status.Phase == b.Status.Phase && a.Status.CleanupReceipt != nil && b.Status.CleanupReceipt != nil &&
		*a.Status.CleanupReceipt == *b.Status.CleanupReceipt
}

// maxCleanupMessage is status.cleanup.message's bound in the CRD.
const maxCleanupMessage = 1024

// accessMaterialCheck reads the member and its legacy access Secret live:
// the material is absent when neither holds it.
func (r *Reconciler) accessMaterialCheck(ctx context.Context, s *scope) (backend.Check, error) {
	c := backend.Check{ManifestResource: kobev1.ManifestResource{Kind: checkAccessMaterial, Name: s.inst.Namespace + "/" + s.inst.Name, ID: string(s.inst.UID)}}
	live := &kobev1.ClusterInstance{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.inst.Namespace, Name: s.inst.Name}, live)
	switch {
	case apierrors.IsNotFound(err), err == nil && live.UID != s.inst.UID:
	case err != nil:
		return c, fmt.Errorf("reading member %s: %w", s.inst.Name, err)
	case live.Status.Access != nil:
		c.Detail = "status.access still holds the sealed client CA key"
		return c, nil
	}
	name := memberaccess.SecretName(s.inst.Name)
	err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.inst.Namespace, Name: name}, &corev1.Secret{})
	switch {
	case apierrors.IsNotFound(err):
		c.Absent, c.Detail = true, "the member's client CA key and admin kubeconfig are deleted"
	case err != nil:
		return c, fmt.Errorf("reading access Secret %s: %w", name, err)
	default:
		c.Detail = "access Secret " + name + " still exists"
	}
	return c, nil
}
