//go:build integration

package cachetrim_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/cachetrim"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/credentials/membercerts"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const applied = `{"kind":"Secret","data":{"token":"c2VjcmV0"}}`

// TestCachedObjectsAreTrimmed: objects read through a manager whose cache
// uses Transform carry no managedFields, a Secret carries no last-applied
// copy of itself, everything else is intact, reads are still copies, and a
// full Update of a cached object keeps the server's managedFields.
func TestCachedObjectsAreTrimmed(t *testing.T) {
	env := testenv.Start(t)
	ns := env.NewNamespace(t)
	ctx := t.Context()
	p := &kobev1.ClusterPool{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"kind":"ClusterPool"}`}},
		Spec:       kobev1.ClusterPoolSpec{Size: ptr.To[int32](1), Backend: kobev1.BackendSpec{Type: kobev1.BackendLocal}},
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: ns, Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: applied, "keep": "me"}},
		Data:       map[string][]byte{"token": []byte("secret")},
	}
	for _, o := range []client.Object{p, s} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		if len(o.GetManagedFields()) == 0 {
			t.Fatalf("the API server set no managedFields on %T: nothing to trim", o)
		}
	}

	opts := env.ManagerOptions(ns)
	opts.Cache.DefaultTransform = cachetrim.Transform
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{&kobev1.ClusterPool{}, &corev1.Secret{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.StartManager(t, mgr)
	c := mgr.GetClient()

	var gotPool kobev1.ClusterPool
	var gotSecret corev1.Secret
	testenv.Eventually(t, 30*time.Second, "the cache to hold both objects", func() error {
		return errors.Join(c.Get(ctx, client.ObjectKeyFromObject(p), &gotPool), c.Get(ctx, client.ObjectKeyFromObject(s), &gotSecret))
	})
	if mf := gotPool.GetManagedFields(); mf != nil {
		t.Errorf("cached pool has managedFields %v", mf)
	}
	if mf := gotSecret.GetManagedFields(); mf != nil {
		t.Errorf("cached Secret has managedFields %v", mf)
	}
	if v, ok := gotSecret.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Errorf("cached Secret keeps the last-applied annotation (%d bytes)", len(v))
	}
	if gotSecret.Annotations["keep"] != "me" || string(gotSecret.Data["token"]) != "secret" {
		t.Errorf("cached Secret lost more than it should: annotations %v, data %q", gotSecret.Annotations, gotSecret.Data["token"])
	}
	if gotPool.Annotations[corev1.LastAppliedConfigAnnotation] == "" || gotPool.Spec.Size == nil || *gotPool.Spec.Size != 1 {
		t.Errorf("cached pool lost more than managedFields: annotations %v, spec %+v", gotPool.Annotations, gotPool.Spec)
	}

	// Reads are copies: changing one does not change the cache.
	gotSecret.Data["token"] = []byte("changed")
	var again corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &again); err != nil {
		t.Fatal(err)
	}
	if string(again.Data["token"]) != "secret" {
		t.Errorf("a read changed the cache: token %q", again.Data["token"])
	}

	// A full Update of the trimmed pool keeps what the server recorded.
	gotPool.Labels = map[string]string{"touched": "yes"}
	if err := c.Update(ctx, &gotPool); err != nil {
		t.Fatal(err)
	}
	var live kobev1.ClusterPool
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &live); err != nil {
		t.Fatal(err)
	}
	if len(live.ManagedFields) == 0 || live.Annotations[corev1.LastAppliedConfigAnnotation] == "" {
		t.Errorf("an Update from the cache wiped the server's record: managedFields %v, annotations %v", live.ManagedFields, live.Annotations)
	}
}

// TestTransformPassesTombstones: an informer may hand the transform a
// deletion tombstone; it passes unchanged.
func TestTransformPassesTombstones(t *testing.T) {
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/x", Obj: &corev1.Secret{}}
	out, err := cachetrim.Transform(tomb)
	if err != nil || fmt.Sprint(out) != fmt.Sprint(tomb) {
		t.Errorf("Transform(tombstone) = %v, %v; want it unchanged", out, err)
	}
}

// TestMembersDropTheAdminKubeconfig: a member is cached without its sealed
// admin kubeconfig (read only live) but with everything a lease's
// kubeconfig is minted from; a legacy access Secret likewise; another
// Secret that happens to have a key of that name keeps it.
func TestMembersDropTheAdminKubeconfig(t *testing.T) {
	inst := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", UID: "m-uid"},
		Spec: kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "p"}}}
	access := &backend.Access{Endpoint: "https://127.0.0.1:1", CACert: []byte("ca"), ClientCACert: []byte("client-ca"),
		ClientCAKey: []byte("client-ca-key"), AdminKubeconfig: []byte("admin")}
	accesstest.Publish(t, inst, access)
	out, err := cachetrim.Transform(inst.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	cached := out.(*kobev1.ClusterInstance)
	if cached.Status.Access == nil || cached.Status.Access.SealedAdminKubeconfig != nil {
		t.Fatalf("the cached member's access: %+v, want it without the admin kubeconfig", cached.Status.Access)
	}
	got, err := accesstest.Sealer().ForLeases(cached)
	if err != nil {
		t.Fatalf("ForLeases on the cached member: %v", err)
	}
	if got.Endpoint != access.Endpoint || string(got.ClientCAKey) != "client-ca-key" || string(got.CACert) != "ca" || string(got.ClientCACert) != "client-ca" {
		t.Errorf("ForLeases = %+v, want the member's endpoint, CA and client CA", got)
	}

	// A backend's admin kubeconfig, sealed in its compact form, is dropped
	// the same way.
	authorities, err := membercerts.NewAuthorities()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := membercerts.AdminKubeconfig(authorities.ServerCA.CertPEM, authorities.AdminCert, authorities.AdminKey, "kobe-member", access.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	compact := inst.DeepCopy()
	accesstest.Publish(t, compact, &backend.Access{Endpoint: access.Endpoint, CACert: authorities.ServerCA.CertPEM,
		ClientCACert: authorities.ClientCA.CertPEM, ClientCAKey: authorities.ClientCA.KeyPEM, AdminKubeconfig: kc})
	if len(compact.Status.Access.SealedAdminCredential) == 0 {
		t.Fatal("a backend's admin kubeconfig was not sealed in the compact form")
	}
	if out, err = cachetrim.Transform(compact.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if a := out.(*kobev1.ClusterInstance).Status.Access; a.SealedAdminCredential != nil || a.SealedAdminKubeconfig != nil {
		t.Fatalf("the cached member keeps its admin credential: %+v", a)
	}
	if _, err := accesstest.Sealer().Full(out.(*kobev1.ClusterInstance)); err == nil {
		t.Fatal("the cached member's admin kubeconfig opened")
	}

	out, err = cachetrim.Transform(memberaccess.LegacySecret(inst, access))
	if err != nil {
		t.Fatal(err)
	}
	if _, has := out.(*corev1.Secret).Data[memberaccess.KeyAdminKubeconfig]; has {
		t.Error("the cached legacy access Secret keeps the admin kubeconfig")
	}

	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"},
		Data: map[string][]byte{memberaccess.KeyAdminKubeconfig: []byte("kept")}}
	out, err = cachetrim.Transform(other)
	if err != nil {
		t.Fatal(err)
	}
	if string(out.(*corev1.Secret).Data[memberaccess.KeyAdminKubeconfig]) != "kept" {
		t.Error("a Secret that is not a member's access Secret lost a key")
	}
}
