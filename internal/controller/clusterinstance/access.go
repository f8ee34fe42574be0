package clusterinstance

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
)

// publishAccess seals the member's access material into its status: it is
// written with the move to Provisioned (the status write this reconcile
// ends with), once, and deleted with the member.
func (r *Reconciler) publishAccess(ctx context.Context, s *scope, a *backend.Access) error {
	if meta.IsStatusConditionTrue(s.inst.Status.Conditions, kobev1.ConditionProvisioned) && s.inst.Status.Access != nil {
		return nil
	}
	if a == nil {
		return fmt.Errorf("backend reports member %s Ready without access material", s.inst.Name)
	}
	if err := r.recordManifest(ctx, s); err != nil {
		return err
	}
	if err := r.Access.Publish(s.inst, a); err != nil {
		return err
	}
	r.setCondition(s, kobev1.ConditionProvisioned, metav1.ConditionTrue, kobev1.ReasonProvisioned,
		"the backend built the member; its access material is sealed in status.access")
	return nil
}

// adminKubeconfig opens the member's admin kubeconfig from a live read of
// the member: the cache drops it. In the reconcile that published it, it is
// still in memory, and the live member has it only once the status is
// written.
func (r *Reconciler) adminKubeconfig(ctx context.Context, s *scope) ([]byte, error) {
	if m := s.inst.Status.Access; m != nil && (len(m.SealedAdminCredential) > 0 || len(m.SealedAdminKubeconfig) > 0) {
		a, err := r.Access.Full(s.inst)
		if err != nil {
			return nil, err
		}
		return a.AdminKubeconfig, nil
	}
	live := &kobev1.ClusterInstance{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: s.inst.Namespace, Name: s.inst.Name}, live); err != nil {
		return nil, fmt.Errorf("reading member %s: %w", s.inst.Name, err)
	}
	if live.UID != s.inst.UID {
		return nil, fmt.Errorf("member %s was replaced (uid %s, want %s)", s.inst.Name, live.UID, s.inst.UID)
	}
	a, err := memberaccess.Read(ctx, r.APIReader, r.Access, live, true)
	if err != nil {
		return nil, err
	}
	return a.AdminKubeconfig, nil
}

// moveLegacyAccess moves the access material of a member built by an older
// operator from its Secret into status.access, then deletes the Secret.
// Until then every reader falls back to the Secret (memberaccess.Read).
func (r *Reconciler) moveLegacyAccess(ctx context.Context, s *scope) (ctrl.Result, error) {
	a, err := memberaccess.Read(ctx, r.APIReader, r.Access, s.inst, true)
	if err != nil {
		if apierrors.IsNotFound(err) || errors.Is(err, memberaccess.ErrNotOwned) {
			// Nothing of its own to move: the member cannot be reached.
			return r.recycle(ctx, s, kobev1.ReasonAccessUnreadable, err.Error())
		}
		return ctrl.Result{}, err
	}
	sealed, err := r.Access.Seal(s.inst, a)
	if err != nil {
		return ctrl.Result{}, err
	}
	s.inst.Status.Access = sealed
	s.inst.Status.AccessSecretRef = nil
	if err := s.patch.Status(ctx); err != nil || s.patch.Done() {
		return ctrl.Result{}, err
	}
	if err := r.deleteLegacySecret(ctx, s.inst); err != nil {
		return ctrl.Result{}, err
	}
	s.log.Info("Moved the member's access material from its Secret into status.access")
	return ctrl.Result{}, nil // the write wakes the member again
}

// deleteLegacySecret deletes the access Secret an older operator wrote for
// inst, if any, and only if inst owns it: a Secret of that name someone
// else made is not kobe's to delete.
func (r *Reconciler) deleteLegacySecret(ctx context.Context, inst *kobev1.ClusterInstance) error {
	sec := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: inst.Namespace, Name: memberaccess.SecretName(inst.Name)}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading access Secret %s: %w", memberaccess.SecretName(inst.Name), err)
	case !memberaccess.OwnedBy(sec, inst):
		return nil
	}
	uid := sec.UID
	if err := r.Client.Delete(ctx, sec, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting access Secret %s: %w", sec.Name, err)
	}
	return nil
}

// accessUnreadable reports why a Provisioned member's access material does
// not open with this operator's key ("" when it opens): such a member can
// never be handed out.
func (r *Reconciler) accessUnreadable(s *scope) string {
	if s.inst.Status.Access == nil {
		return ""
	}
	if _, err := r.Access.ForLeases(s.inst); err != nil {
		return err.Error()
	}
	return ""
}
