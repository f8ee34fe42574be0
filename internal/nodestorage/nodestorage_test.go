package nodestorage

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kunobi-ninja/kobe/internal/node"
)

func claim(mut ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "app", UID: "0f3c2a7e-1111-4222-8333-444455556666",
			Annotations: map[string]string{annStorageProvisioner: ProvisionerName, annSelectedNode: "node-0"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(ClassName),
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	for _, m := range mut {
		m(c)
	}
	return c
}

func TestWantsVolume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		want  bool
	}{
		{"a claim scheduled to this node", claim(), true},
		{"scheduled to another node", claim(func(c *corev1.PersistentVolumeClaim) { c.Annotations[annSelectedNode] = "node-1" }), false},
		{"not scheduled yet", claim(func(c *corev1.PersistentVolumeClaim) { delete(c.Annotations, annSelectedNode) }), false},
		{"another provisioner's", claim(func(c *corev1.PersistentVolumeClaim) { c.Annotations[annStorageProvisioner] = "ebs.csi.aws.com" }), false},
		{"bound already", claim(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pvc-x" }), false},
		{"being deleted", claim(func(c *corev1.PersistentVolumeClaim) { c.DeletionTimestamp = ptr.To(metav1.Now()) }), false},
		{"a block volume (a directory cannot be one)", claim(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock) }), false},
	} {
		if got := wantsVolume(tc.claim, "node-0"); got != tc.want {
			t.Errorf("%s: wantsVolume = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func class() *storagev1.StorageClass {
	for _, o := range Objects() {
		if sc, ok := o.(*storagev1.StorageClass); ok {
			return sc
		}
	}
	return nil
}

func TestVolumeFor(t *testing.T) {
	pv, err := volumeFor(claim(), class(), "node-0")
	if err != nil {
		t.Fatal(err)
	}
	hp := pv.Spec.HostPath
	switch {
	case pv.Name != "pvc-0f3c2a7e-1111-4222-8333-444455556666":
		t.Errorf("name %s", pv.Name)
	case hp == nil || hp.Path != node.StorageRoot+"/"+pv.Name || *hp.Type != corev1.HostPathDirectoryOrCreate:
		t.Errorf("hostPath %+v: want a directory of the volumes' root named after the PV", hp)
	case !onNode(pv, "node-0") || onNode(pv, "node-1"):
		t.Errorf("node affinity %+v", pv.Spec.NodeAffinity)
	case pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != claim().UID || pv.Spec.ClaimRef.Namespace != "app":
		t.Errorf("claimRef %+v", pv.Spec.ClaimRef)
	case pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.StorageClassName != ClassName:
		t.Errorf("reclaim %s class %s", pv.Spec.PersistentVolumeReclaimPolicy, pv.Spec.StorageClassName)
	case pv.Spec.Capacity.Storage().String() != "1Gi":
		t.Errorf("capacity %v", pv.Spec.Capacity)
	}
	if _, err := volumeFor(claim(func(c *corev1.PersistentVolumeClaim) { c.UID = "../../etc" }), class(), "node-0"); err == nil {
		t.Error("a claim UID that is no directory name made a volume")
	}
	if _, err := volumeFor(claim(func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }), class(), "node-0"); err == nil {
		t.Error("a claim without a storage request made a volume")
	}
}

func TestReclaimable(t *testing.T) {
	released := func(mut ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		pv, err := volumeFor(claim(), class(), "node-0")
		if err != nil {
			t.Fatal(err)
		}
		pv.Status.Phase = corev1.VolumeReleased
		for _, m := range mut {
			m(pv)
		}
		return pv
	}
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
	}{
		{"released, Delete, this node's", released(), true},
		{"still bound", released(func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeBound }), false},
		{"Retain", released(func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
		}), false},
		{"another node's", released(func(pv *corev1.PersistentVolume) { pv.Labels[LabelNode] = "node-1" }), false},
		{"labelled for this node but pinned to another", released(func(pv *corev1.PersistentVolume) {
			pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = []string{"node-1"}
		}), false},
		{"not this provisioner's", released(func(pv *corev1.PersistentVolume) { delete(pv.Annotations, AnnotationProvisionedBy) }), false},
		{"a path that is not the PV's own directory", released(func(pv *corev1.PersistentVolume) { pv.Spec.HostPath.Path = node.StorageRoot + "/other" }), false},
		{"a path outside the root", released(func(pv *corev1.PersistentVolume) { pv.Spec.HostPath.Path = "/etc" }), false},
	} {
		if _, got := reclaimable(tc.pv, "node-0"); got != tc.want {
			t.Errorf("%s: reclaimable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestProvisionerSteps: the reconcilers against a fake client (the PV
// controller's binding is the test's part): a directory and a bound PV
// for the claim, then both gone once it is released.
func TestProvisionerSteps(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithObjects(claim(), class()).WithStatusSubresource(&corev1.PersistentVolume{}).Build()
	root := t.TempDir()
	p := &Provisioner{Client: c, Node: "node-0", Root: root}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "app", Name: "data"}}
	for range 2 { // again: nothing more happens
		if _, err := p.ReconcileClaim(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: VolumeName(claim())}, pv); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, pv.Name)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("volume directory %s: %v %v", dir, fi, err)
	}
	// Another node's provisioner makes nothing.
	other := &Provisioner{Client: c, Node: "node-1", Root: t.TempDir()}
	if _, err := other.ReconcileClaim(ctx, req); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(other.Root); len(entries) != 0 {
		t.Errorf("node-1 made %v for a claim of node-0", entries)
	}
	vreq := ctrl.Request{NamespacedName: types.NamespacedName{Name: pv.Name}}
	if _, err := p.ReconcileVolume(ctx, vreq); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a bound volume's directory was removed: %v", err)
	}
	pv.Status.Phase = corev1.VolumeReleased
	if err := c.Status().Update(ctx, pv); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ReconcileVolume(ctx, vreq); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("node-1 removed node-0's volume: %v", err)
	}
	if _, err := p.ReconcileVolume(ctx, vreq); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the released volume's directory is still there: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: pv.Name}, &corev1.PersistentVolume{}); err == nil {
		t.Error("the released PV is still there")
	}
}
