package incluster

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// Labels every host object of a member carries. The member-UID label is
// what Delete and Sweep select on; the instance and pool labels are kobe's
// own (api/v1alpha1) so that `kubectl get pods -l kobe.kunobi.ninja/pool=ci`
// shows a pool's members.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by, ManagedBy on kobe's objects.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value.
	ManagedBy = "kobe"
	// LabelMemberUID carries the UID of the ClusterInstance the object
	// belongs to (kobev1.LabelMemberUID).
	LabelMemberUID = kobev1.LabelMemberUID
	// LabelBackend carries the backend type that made the object, so that
	// each backend sweeps only its own.
	LabelBackend = "kobe.kunobi.ninja/backend"
	// LabelComponent is app.kubernetes.io/component: "control-plane" on pods.
	LabelComponent = "app.kubernetes.io/component"

	// AnnotationClusterIP, on the PKI Secret, is the Service ClusterIP its
	// serving certificate was issued for.
	AnnotationClusterIP = "kobe.kunobi.ninja/cluster-ip"
	// AnnotationPodsCreated, on the Service, records that the member's pods
	// were created once. From then on Create never makes a pod again: a
	// control-plane pod that is gone took its etcd with it, and the member
	// is reaped (Observe reports Failed) instead of restarted empty.
	AnnotationPodsCreated = "kobe.kunobi.ninja/pods-created"

	componentControlPlane = "control-plane"
)

// maxBase keeps every name of a member (base plus the longest suffix,
// "-server-NN" or "-node-NN") within a DNS-1035 label's 63 characters.
const maxBase = 50

// baseName is the prefix of all of a member's object names: "kobe-<name>",
// with dots replaced (Service names are DNS-1035 labels), or, for a long
// name, its head and a hash of the whole name and UID.
func baseName(m backend.Member) string {
	name := strings.ReplaceAll(m.Name, ".", "-")
	base := "kobe-" + name
	if len(base) <= maxBase {
		return base
	}
	sum := sha256.Sum256([]byte(m.Name + "/" + string(m.UID)))
	head := strings.TrimRight(base[:maxBase-9], "-")
	return head + "-" + hex.EncodeToString(sum[:])[:8]
}

func serviceName(m backend.Member) string { return baseName(m) }
func secretName(m backend.Member) string  { return baseName(m) + "-pki" }

// EgressServiceName names the Service of the member's node pods' egress
// proxies (PKINeeds.Egress).
func EgressServiceName(m backend.Member) string { return baseName(m) + "-egress" }
func policyName(m backend.Member) string        { return baseName(m) }
func pdbName(m backend.Member) string           { return baseName(m) }
func podName(m backend.Member, i int) string {
	return baseName(m) + "-server-" + strconv.Itoa(i)
}

// memberLabels are the labels of every object of the member.
func memberLabels(t kobev1.BackendType, m backend.Member) map[string]string {
	l := map[string]string{
		LabelManagedBy:       ManagedBy,
		LabelMemberUID:       string(m.UID),
		LabelBackend:         string(t),
		kobev1.LabelPool:     truncLabel(m.Pool),
		kobev1.LabelInstance: truncLabel(m.Name),
	}
	return l
}

// selectorFor selects the objects (or pods) of one member.
func selectorFor(t kobev1.BackendType, m backend.Member) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelBackend: string(t), LabelMemberUID: string(m.UID)}
}

// controlPlaneSelector selects the member's control-plane pods (not its
// node pods).
func controlPlaneSelector(t kobev1.BackendType, m backend.Member) map[string]string {
	l := selectorFor(t, m)
	l[LabelComponent] = componentControlPlane
	return l
}

// truncLabel keeps a label value within 63 characters.
func truncLabel(v string) string {
	if len(v) <= 63 {
		return v
	}
	return strings.TrimRight(v[:63], "-.")
}

// ownerRef makes the ClusterInstance the object's controller, so that the
// host's garbage collector removes it should the operator never get to.
func ownerRef(m backend.Member) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: kobev1.GroupVersion.String(),
		Kind:       "ClusterInstance",
		Name:       m.Name,
		UID:        m.UID,
		Controller: ptr.To(true),
	}
}

// objectMeta is the metadata of a member's object called name.
func objectMeta(t kobev1.BackendType, m backend.Member, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       m.Namespace,
		Labels:          memberLabels(t, m),
		OwnerReferences: []metav1.OwnerReference{ownerRef(m)},
	}
}

// ownedBy says whether obj belongs to member m: by label or by owner.
func ownedBy(obj metav1.Object, m backend.Member) bool {
	if obj.GetLabels()[LabelMemberUID] == string(m.UID) {
		return true
	}
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == m.UID {
			return true
		}
	}
	return false
}
