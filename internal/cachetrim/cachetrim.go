package cachetrim

import (
	corev1 "k8s.io/api/core/v1"

	"sigs.k8s.io/controller-runtime/pkg/cache"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"

	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
)

// stripManagedFields is controller-runtime's own transform.
var stripManagedFields = cache.TransformStripManagedFields()

// Transform is a cache.Options.DefaultTransform. It drops from each object:
//   - metadata.managedFields, which kobe never reads and which is often as
//     large as the rest of a small object. A full Update of an object read
//     from the cache still keeps the server's managedFields: the API server
//     keeps them when a request carries none.
//   - on Secrets, the kubectl.kubernetes.io/last-applied-configuration
//     annotation: a second copy of the Secret's data (a policy's token
//     included) that nothing in kobe reads. Kobe never writes back a Secret
//     read from the cache. Other kinds keep it, so that a full Update of an
//     object read from the cache cannot remove it.
//   - on members, the sealed admin kubeconfig in status.access: about half
//     of each member's access material (10,000 members hold tens of MB of
//     it), read only live (the instance controller, the connect proxy);
//     minting a lease's kubeconfig needs the rest (Sealer.ForLeases). Kobe
//     writes members' status as merge patches, which leave it alone, and
//     a full Update of a member ignores its status.
//   - the same on the access Secrets an older operator wrote per member.
//
// Anything that is not an object (a deletion tombstone) passes unchanged.
// Readers still get deep copies: the transform runs once, before the object
// is stored, and does not change the cache's copy-on-read.
func Transform(in any) (any, error) {
	out, err := stripManagedFields(in)
	if err != nil {
		return nil, err
	}
	if s, ok := out.(*corev1.Secret); ok {
		delete(s.Annotations, corev1.LastAppliedConfigAnnotation)
		if memberaccess.IsAccessSecret(s) {
			delete(s.Data, memberaccess.KeyAdminKubeconfig)
		}
	}
	if inst, ok := out.(*kobev1.ClusterInstance); ok && inst.Status.Access != nil {
		inst.Status.Access.SealedAdminKubeconfig = nil
		inst.Status.Access.SealedAdminCredential = nil
	}
	return out, nil
}

// Transform fits the informers' hook.
var _ = cache.Options{DefaultTransform: Transform}
