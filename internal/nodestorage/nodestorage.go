// Package nodestorage is the default StorageClass of members with nodes:
// volumes on the disk of the node a claim's first pod runs on, as kind's
// and k3d's clusters have. Each node's kobe-node runs a provisioner (Run,
// the "kobe-node storage" daemon) for the claims scheduled to it, with the
// node's own credentials; the DNSHealthy gate creates Objects in the
// member before it is Ready (docs/nodes.md, "Storage").
//
// A volume is a directory node.StorageRoot/<PV name> in the node's mount
// namespace, on the node's disk (the local backend's member directory, or
// the node pod's emptyDir), served as a hostPath PersistentVolume pinned
// to the node. The member's admission policy lets hostPath volumes name
// nothing else (internal/podsecurity), so a lease holder who creates such
// PersistentVolumes by hand gets a fresh directory of that node, never its
// files.
package nodestorage

import (
	"fmt"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/node"
)

const (
	// ProvisionerName is the StorageClass's provisioner, and what each PV
	// it made records in AnnotationProvisionedBy.
	ProvisionerName = "kobe.kunobi.ninja/node-local"
	// ClassName is the default StorageClass, named as kind names its own.
	ClassName = "standard"
	// AnnotationProvisionedBy on a PV names its provisioner (the key the
	// Kubernetes PV controller and external provisioners use).
	AnnotationProvisionedBy = "pv.kubernetes.io/provisioned-by"
	// annStorageProvisioner is set by the PV controller on a claim of a
	// class whose provisioner is external; annSelectedNode by the scheduler
	// on a claim of a WaitForFirstConsumer class, once its pod has a node.
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annSelectedNode       = "volume.kubernetes.io/selected-node"
	// LabelNode on a PV names the node whose disk holds it.
	LabelNode = "kobe.kunobi.ninja/node"
	// clusterRole is what a node's provisioner may do; it is bound to the
	// group of every node's credentials (system:nodes).
	clusterRole = "kobe:node-storage"
)

// dirName is what a volume's directory may be called: the admission
// policy's pattern for a child of node.StorageRoot (a DNS label, as PV
// names generated here are).
var dirName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// Objects are the cluster objects the provisioners need, in creation
// order: their permissions, bound to every node, then the default class.
func Objects() []client.Object {
	all := []string{"get", "list", "watch"}
	labels := map[string]string{"app.kubernetes.io/managed-by": "kobe"}
	return []client.Object{
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRole, Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: all},
				{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: append(all, "create", "delete")},
				{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: all},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: clusterRole, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
		},
		&storagev1.StorageClass{
			ObjectMeta: metav1.ObjectMeta{Name: ClassName, Labels: labels,
				Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
			Provisioner: ProvisionerName,
			// The scheduler picks the node first: the volume lives on the
			// disk of the node its first pod runs on.
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		},
	}
}

// wantsVolume reports whether the provisioner of nodeName makes a volume
// for claim: a Filesystem claim of this provisioner's class, not bound yet,
// whose first pod the scheduler put on nodeName.
func wantsVolume(claim *corev1.PersistentVolumeClaim, nodeName string) bool {
	return claim.DeletionTimestamp == nil && claim.Spec.VolumeName == "" &&
		claim.Annotations[annStorageProvisioner] == ProvisionerName &&
		claim.Annotations[annSelectedNode] == nodeName &&
		ptr.Deref(claim.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) == corev1.PersistentVolumeFilesystem
}

// VolumeName is the PV made for claim (as the external provisioners name
// theirs): one per claim, whichever node or retry creates it.
func VolumeName(claim *corev1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

// volumeFor is the PV for claim on nodeName, of class: the directory
// node.StorageRoot/<name>, bound to the claim from the start, pinned to the
// node. Its capacity is the claim's request: a hostPath volume has no size
// of its own, so nothing enforces it (the member's disk limit bounds all
// volumes together).
func volumeFor(claim *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, nodeName string) (*corev1.PersistentVolume, error) {
	name := VolumeName(claim)
	if !dirName.MatchString(name) {
		return nil, fmt.Errorf("claim %s/%s: volume name %q is not a directory name the member allows", claim.Namespace, claim.Name, name)
	}
	size, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil, fmt.Errorf("claim %s/%s requests no storage", claim.Namespace, claim.Name)
	}
	modes := claim.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{LabelNode: nodeName},
			Annotations: map[string]string{AnnotationProvisionedBy: ProvisionerName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: ptr.Deref(class.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete),
			StorageClassName:              class.Name,
			MountOptions:                  class.MountOptions,
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: node.StorageRoot + "/" + name, Type: ptr.To(corev1.HostPathDirectoryOrCreate),
			}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
			}}}},
		},
	}, nil
}

// reclaimable returns the directory name of pv when the provisioner of
// nodeName removes it: a volume it made on that node, released by its
// claim, with reclaim policy Delete. A PV whose path is not a directory of
// node.StorageRoot named after the PV is never touched.
func reclaimable(pv *corev1.PersistentVolume, nodeName string) (string, bool) {
	if pv.DeletionTimestamp != nil || pv.Annotations[AnnotationProvisionedBy] != ProvisionerName ||
		pv.Labels[LabelNode] != nodeName || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.HostPath == nil {
		return "", false
	}
	if pv.Spec.HostPath.Path != node.StorageRoot+"/"+pv.Name || !dirName.MatchString(pv.Name) || !onNode(pv, nodeName) {
		return "", false
	}
	return pv.Name, true
}

// onNode reports whether pv's node affinity pins it to nodeName alone.
func onNode(pv *corev1.PersistentVolume, nodeName string) bool {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 {
		return false
	}
	exprs := na.Required.NodeSelectorTerms[0].MatchExpressions
	return len(exprs) == 1 && exprs[0].Key == corev1.LabelHostname && slices.Equal(exprs[0].Values, []string{nodeName})
}
