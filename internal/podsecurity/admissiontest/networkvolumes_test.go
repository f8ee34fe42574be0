//go:build integration

package admissiontest

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/podsecurity"
)

// A documentation address (RFC 5737): nothing serves it, and nothing mounts
// it, since every object naming it is refused or never runs.
const storageServer = "192.0.2.1"

// networkPodVolumes are valid pod volumes of each source the network volume
// policy refuses (the API's own validation must pass first).
var networkPodVolumes = map[string]corev1.VolumeSource{
	"nfs":                  {NFS: &corev1.NFSVolumeSource{Server: storageServer, Path: "/"}},
	"iscsi":                {ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: storageServer + ":3260", IQN: "iqn.2001-04.com.example:storage", Lun: 0}},
	"cephfs":               {CephFS: &corev1.CephFSVolumeSource{Monitors: []string{storageServer + ":6789"}}},
	"rbd":                  {RBD: &corev1.RBDVolumeSource{CephMonitors: []string{storageServer + ":6789"}, RBDImage: "image"}},
	"glusterfs":            {Glusterfs: &corev1.GlusterfsVolumeSource{EndpointsName: "gluster", Path: "volume"}},
	"fc":                   {FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5"}, Lun: ptr.To[int32](0)}},
	"flexVolume":           {FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/nfs"}},
	"quobyte":              {Quobyte: &corev1.QuobyteVolumeSource{Registry: storageServer + ":7861", Volume: "volume"}},
	"storageos":            {StorageOS: &corev1.StorageOSVolumeSource{VolumeName: "volume"}},
	"portworxVolume":       {PortworxVolume: &corev1.PortworxVolumeSource{VolumeID: "volume"}},
	"scaleIO":              {ScaleIO: &corev1.ScaleIOVolumeSource{Gateway: "https://" + storageServer, System: "system", VolumeName: "volume", SecretRef: &corev1.LocalObjectReference{Name: "scaleio"}}},
	"flocker":              {Flocker: &corev1.FlockerVolumeSource{DatasetName: "dataset"}},
	"azureFile":            {AzureFile: &corev1.AzureFileVolumeSource{SecretName: "azure", ShareName: "share"}},
	"azureDisk":            {AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "disk", DataDiskURI: "https://example.blob.core.windows.net/vhds/disk.vhd"}},
	"gcePersistentDisk":    {GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "disk"}},
	"awsElasticBlockStore": {AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-0123"}},
	"cinder":               {Cinder: &corev1.CinderVolumeSource{VolumeID: "volume"}},
	"vsphereVolume":        {VsphereVolume: &corev1.VsphereVirtualDiskVolumeSource{VolumePath: "[datastore] volume.vmdk"}},
	"photonPersistentDisk": {PhotonPersistentDisk: &corev1.PhotonPersistentDiskVolumeSource{PdID: "disk"}},
	"gitRepo":              {GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://" + storageServer + "/repository.git"}},
}

// networkPersistentVolumes are valid PersistentVolume sources of each kind
// the network volume policy refuses.
var networkPersistentVolumes = map[string]corev1.PersistentVolumeSource{
	"nfs":                  {NFS: &corev1.NFSVolumeSource{Server: storageServer, Path: "/"}},
	"iscsi":                {ISCSI: &corev1.ISCSIPersistentVolumeSource{TargetPortal: storageServer + ":3260", IQN: "iqn.2001-04.com.example:storage", Lun: 0}},
	"cephfs":               {CephFS: &corev1.CephFSPersistentVolumeSource{Monitors: []string{storageServer + ":6789"}}},
	"rbd":                  {RBD: &corev1.RBDPersistentVolumeSource{CephMonitors: []string{storageServer + ":6789"}, RBDImage: "image"}},
	"glusterfs":            {Glusterfs: &corev1.GlusterfsPersistentVolumeSource{EndpointsName: "gluster", Path: "volume"}},
	"fc":                   {FC: &corev1.FCVolumeSource{TargetWWNs: []string{"500a0981891b8dc5"}, Lun: ptr.To[int32](0)}},
	"flexVolume":           {FlexVolume: &corev1.FlexPersistentVolumeSource{Driver: "example.com/nfs"}},
	"quobyte":              {Quobyte: &corev1.QuobyteVolumeSource{Registry: storageServer + ":7861", Volume: "volume"}},
	"storageos":            {StorageOS: &corev1.StorageOSPersistentVolumeSource{VolumeName: "volume"}},
	"portworxVolume":       {PortworxVolume: &corev1.PortworxVolumeSource{VolumeID: "volume"}},
	"scaleIO":              {ScaleIO: &corev1.ScaleIOPersistentVolumeSource{Gateway: "https://" + storageServer, System: "system", VolumeName: "volume", SecretRef: &corev1.SecretReference{Name: "scaleio"}}},
	"flocker":              {Flocker: &corev1.FlockerVolumeSource{DatasetName: "dataset"}},
	"azureFile":            {AzureFile: &corev1.AzureFilePersistentVolumeSource{SecretName: "azure", ShareName: "share"}},
	"azureDisk":            {AzureDisk: &corev1.AzureDiskVolumeSource{DiskName: "disk", DataDiskURI: "https://example.blob.core.windows.net/vhds/disk.vhd"}},
	"gcePersistentDisk":    {GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "disk"}},
	"awsElasticBlockStore": {AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol-0123"}},
	"cinder":               {Cinder: &corev1.CinderPersistentVolumeSource{VolumeID: "volume"}},
	"vsphereVolume":        {VsphereVolume: &corev1.VsphereVirtualDiskVolumeSource{VolumePath: "[datastore] volume.vmdk"}},
	"photonPersistentDisk": {PhotonPersistentDisk: &corev1.PhotonPersistentDiskVolumeSource{PdID: "disk"}},
}

// whatToDo is what every refusal of a network volume says.
const whatToDo = "spec.cluster.networkVolumes is Refused (set it to Allowed to use them)"

// assertNetworkVolumeRefused checks that err is the network volume policy's
// refusal, naming each of want and saying what to do.
func assertNetworkVolumeRefused(t *testing.T, err error, want ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), podsecurity.NetworkVolumePolicy) {
		t.Fatalf("want a refusal by %s, got %v", podsecurity.NetworkVolumePolicy, err)
	}
	for _, w := range append(want, whatToDo) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal does not say %q: %v", w, err)
		}
	}
}

func podWithVolumes(name string, volumes ...corev1.Volume) *corev1.Pod {
	p := pod(name)
	p.Spec.Volumes = volumes
	for _, v := range volumes {
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name})
	}
	return p
}

// TestNetworkVolumesRefused creates, as system:masters of a member whose
// pool sets nothing, a pod with an inline volume and a PersistentVolume of
// each source the node would mount from the network or attach from outside
// the member: every one is refused with what to do, and volumes built from
// API objects, the node's disk, claims or CSI are not.
func TestNetworkVolumesRefused(t *testing.T) {
	const ns = "network-volumes"
	createNamespace(t, ns)
	for source, vs := range networkPodVolumes {
		t.Run("pod with "+source, func(t *testing.T) {
			p := podWithVolumes("p-"+strings.ToLower(source), corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				corev1.Volume{Name: "net", VolumeSource: vs})
			_, err := fx.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
			assertNetworkVolumeRefused(t, err, source+" (volume net)")
		})
	}
	for source, pvs := range networkPersistentVolumes {
		t.Run("PersistentVolume of "+source, func(t *testing.T) {
			_, err := fx.cs.CoreV1().PersistentVolumes().Create(t.Context(), persistentVolume("pv-"+strings.ToLower(source), pvs), metav1.CreateOptions{})
			assertNetworkVolumeRefused(t, err, source+" (spec."+source+")")
		})
	}

	t.Run("server-side apply", func(t *testing.T) {
		pv := corev1ac.PersistentVolume("pv-nfs-apply").WithSpec(corev1ac.PersistentVolumeSpec().
			WithCapacity(corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}).
			WithAccessModes(corev1.ReadWriteOnce).
			WithNFS(corev1ac.NFSVolumeSource().WithServer(storageServer).WithPath("/")))
		_, err := fx.cs.CoreV1().PersistentVolumes().Apply(t.Context(), pv, metav1.ApplyOptions{FieldManager: "holder", Force: true})
		assertNetworkVolumeRefused(t, err, "nfs (spec.nfs)")
		p := corev1ac.Pod("p-nfs-apply", ns).WithSpec(corev1ac.PodSpec().
			WithContainers(corev1ac.Container().WithName("c").WithImage("kobe.local/pause:v1")).
			WithVolumes(corev1ac.Volume().WithName("net").WithNFS(corev1ac.NFSVolumeSource().WithServer(storageServer).WithPath("/"))))
		_, err = fx.cs.CoreV1().Pods(ns).Apply(t.Context(), p, metav1.ApplyOptions{FieldManager: "holder", Force: true})
		assertNetworkVolumeRefused(t, err, "nfs (volume net)")
	})

	t.Run("every network volume of a pod is named", func(t *testing.T) {
		p := podWithVolumes("p-several",
			corev1.Volume{Name: "a", VolumeSource: networkPodVolumes["nfs"]},
			corev1.Volume{Name: "b", VolumeSource: networkPodVolumes["iscsi"]})
		_, err := fx.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		assertNetworkVolumeRefused(t, err, "nfs (volume a), iscsi (volume b)")
	})

	t.Run("ordinary volumes", func(t *testing.T) {
		fs := corev1.PersistentVolumeFilesystem
		p := podWithVolumes("p-ordinary",
			corev1.Volume{Name: "empty", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "config"}}}},
			corev1.Volume{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secret"}}},
			corev1.Volume{Name: "projected", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "config"}}},
			}}}},
			corev1.Volume{Name: "downward", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			}}}},
			corev1.Volume{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
			corev1.Volume{Name: "ephemeral", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &fs,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}}}},
			corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "example.csi.k8s.io"}}},
			corev1.Volume{Name: "image", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "kobe.local/pause:v1"}}},
		)
		if _, err := fx.cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Errorf("a pod of ordinary volumes was refused: %v", err)
		}
		csi := persistentVolume("pv-csi", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "example.csi.k8s.io", VolumeHandle: "volume"}})
		if _, err := fx.cs.CoreV1().PersistentVolumes().Create(t.Context(), csi, metav1.CreateOptions{}); err != nil {
			t.Errorf("a CSI PersistentVolume was refused: %v", err)
		}
	})
}

// TestNetworkVolumePolicyCannotBeRemoved tries, as system:masters, to find,
// delete or shadow the policy: it is loaded from a file, so the API neither
// lists nor deletes it and refuses its reserved name, and it still refuses
// afterwards.
func TestNetworkVolumePolicyCannotBeRemoved(t *testing.T) {
	ctx := t.Context()
	reg := fx.cs.AdmissionregistrationV1()
	policies, err := reg.ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bindings, err := reg.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(policies.Items) != 0 || len(bindings.Items) != 0 {
		t.Errorf("the API lists %d policies and %d bindings, want none", len(policies.Items), len(bindings.Items))
	}
	if err := reg.ValidatingAdmissionPolicies().Delete(ctx, podsecurity.NetworkVolumePolicy, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deleting the policy: %v, want NotFound", err)
	}
	if err := reg.ValidatingAdmissionPolicyBindings().Delete(ctx, podsecurity.NetworkVolumePolicy, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deleting the binding: %v, want NotFound", err)
	}
	// A binding of the same name that only audits would replace the
	// policy's, were the name not reserved.
	audit := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: podsecurity.NetworkVolumePolicy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: podsecurity.NetworkVolumePolicy, ValidationActions: []admissionv1.ValidationAction{admissionv1.Audit},
		},
	}
	if _, err := reg.ValidatingAdmissionPolicyBindings().Create(ctx, audit, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("creating an auditing binding of the policy's name: %v, want Invalid", err)
	}
	_, err = fx.cs.CoreV1().PersistentVolumes().Create(ctx, persistentVolume("pv-nfs-after", networkPersistentVolumes["nfs"]), metav1.CreateOptions{})
	assertNetworkVolumeRefused(t, err, "nfs (spec.nfs)")
}

// TestNetworkVolumesAllowed starts a second API server, of a member whose
// pool sets networkVolumes: Allowed: network volumes are admitted there,
// and Pod Security and the node's files are guarded as before.
func TestNetworkVolumesAllowed(t *testing.T) {
	_, cs, stop, err := startMember(t.TempDir(), kobev1.ClusterTemplate{NetworkVolumes: kobev1.NetworkVolumesAllowed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Logf("stopping the second control plane: %v", err)
		}
	})
	ctx := t.Context()
	p := podWithVolumes("p-nfs", corev1.Volume{Name: "net", VolumeSource: networkPodVolumes["nfs"]})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Errorf("an nfs pod was refused: %v", err)
	}
	for _, source := range []string{"nfs", "iscsi"} {
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, persistentVolume("pv-"+source, networkPersistentVolumes[source]), metav1.CreateOptions{}); err != nil {
			t.Errorf("an %s PersistentVolume was refused: %v", source, err)
		}
	}
	_, err = cs.CoreV1().PersistentVolumes().Create(ctx, hostPathPV("pv-slash", "/", nil), metav1.CreateOptions{})
	assertVolumeRefused(t, err, "spec.hostPath.path")
	privileged := pod("p-privileged")
	sc(privileged).Privileged = ptr.To(true)
	if _, err := cs.CoreV1().Pods("default").Create(ctx, privileged, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a privileged pod: %v, want a refusal", err)
	}
}
