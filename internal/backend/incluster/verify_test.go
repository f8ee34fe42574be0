package incluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// verifyFixture is a backend on a fake host holding every object of member
// m, each with a UID of its own.
func verifyFixture(t *testing.T, funcs *interceptor.Funcs) (*Backend, client.Client, backend.Member) {
	t.Helper()
	m := member("pool-ci-0", "")
	meta := func(name, uid string) metav1.ObjectMeta {
		om := objectMeta(kobev1.BackendKubernetes, m, name)
		om.UID = types.UID(uid)
		return om
	}
	objs := []client.Object{
		&corev1.Service{ObjectMeta: meta(serviceName(m), "svc-uid")},
		&corev1.Secret{ObjectMeta: meta(secretName(m), "secret-uid")},
		&networkingv1.NetworkPolicy{ObjectMeta: meta(policyName(m), "np-uid")},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta(pdbName(m), "pdb-uid")},
		&corev1.Pod{ObjectMeta: meta(podName(m, 0), "pod0-uid")},
		&corev1.Pod{ObjectMeta: meta(podName(m, 1), "pod1-uid")},
		// Another member's pod: never in m's manifest.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: "kobe-other-server-0", UID: "other-uid",
			Labels: map[string]string{LabelMemberUID: "uid-2"}}},
	}
	fb := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...)
	if funcs != nil {
		fb = fb.WithInterceptorFuncs(*funcs)
	}
	c := fb.Build()
	return &Backend{opts: Options{Type: kobev1.BackendKubernetes, Client: c, Namespace: m.Namespace}}, c, m
}

func TestManifest(t *testing.T) {
	b, _, m := verifyFixture(t, nil)
	got, err := b.Manifest(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	want := []kobev1.ManifestResource{
		{Kind: "NetworkPolicy", Name: "kobe/kobe-pool-ci-0", ID: "np-uid"},
		{Kind: "Pod", Name: "kobe/kobe-pool-ci-0-server-0", ID: "pod0-uid"},
		{Kind: "Pod", Name: "kobe/kobe-pool-ci-0-server-1", ID: "pod1-uid"},
		{Kind: "PodDisruptionBudget", Name: "kobe/kobe-pool-ci-0", ID: "pdb-uid"},
		{Kind: "Secret", Name: "kobe/kobe-pool-ci-0-pki", ID: "secret-uid"},
		{Kind: "Service", Name: "kobe/kobe-pool-ci-0", ID: "svc-uid"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Manifest =\n%v\nwant\n%v", got, want)
	}
}

// TestVerifyKnowsEveryKind: every kind Delete handles is one Verify can
// look up, and is named as Manifest names it.
func TestVerifyKnowsEveryKind(t *testing.T) {
	for _, k := range kinds {
		o := newObjectOfKind(k.name)
		if o == nil {
			t.Errorf("Verify cannot look up a %s", k.name)
			continue
		}
		if got := kindOf(o); got != k.name {
			t.Errorf("kindOf(%T) = %q, want %q", o, got, k.name)
		}
	}
}

func TestVerify(t *testing.T) {
	ctx := t.Context()
	setup := func(t *testing.T) (*Backend, client.Client, backend.Member, []kobev1.ManifestResource) {
		b, c, m := verifyFixture(t, nil)
		manifest, err := b.Manifest(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return b, c, m, manifest
	}
	verify := func(t *testing.T, b *Backend, m backend.Member, manifest []kobev1.ManifestResource) []backend.Check {
		t.Helper()
		checks, err := b.Verify(ctx, m, manifest)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range manifest {
			if checks[i].ManifestResource != r {
				t.Fatalf("check %d is for %v, want %v (the manifest's order)", i, checks[i].ManifestResource, r)
			}
		}
		last := checks[len(checks)-1]
		if last.Kind != "Credentials" || last.Name != "member client CA" || last.ID != "secret-uid" {
			t.Fatalf("last check %+v, want the member client CA", last)
		}
		return checks
	}
	deleteAll := func(t *testing.T, b *Backend, m backend.Member) {
		t.Helper()
		gone, err := b.Delete(ctx, m)
		if err != nil || !gone {
			t.Fatalf("Delete: %v %v", gone, err)
		}
	}

	t.Run("all absent after Delete", func(t *testing.T) {
		b, _, m, manifest := setup(t)
		deleteAll(t, b, m)
		checks := verify(t, b, m, manifest)
		if len(checks) != len(manifest)+1 {
			t.Fatalf("%d checks for %d resources: %+v", len(checks), len(manifest), checks)
		}
		for _, c := range checks {
			if !c.Absent {
				t.Errorf("%s %s not absent: %s", c.Kind, c.Name, c.Detail)
			}
		}
	})

	t.Run("before Delete nothing is absent", func(t *testing.T) {
		b, _, m, manifest := setup(t)
		checks := verify(t, b, m, manifest)
		if len(checks) != len(manifest)+1 {
			t.Fatalf("%d checks for %d resources: %+v", len(checks), len(manifest), checks)
		}
		for _, c := range checks {
			if c.Absent || !strings.Contains(c.Detail, "still there") {
				t.Errorf("%s %s: absent %v, %s", c.Kind, c.Name, c.Absent, c.Detail)
			}
		}
	})

	t.Run("a survivor with the same UID", func(t *testing.T) {
		b, c, m, manifest := setup(t)
		pod := &corev1.Pod{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: podName(m, 1)}, pod); err != nil {
			t.Fatal(err)
		}
		deleteAll(t, b, m)
		pod.ResourceVersion = ""
		if err := c.Create(ctx, pod); err != nil { // the fake keeps the UID: a survivor
			t.Fatal(err)
		}
		checks := verify(t, b, m, manifest)
		if len(checks) != len(manifest)+1 {
			t.Fatalf("%d checks for %d resources: %+v", len(checks), len(manifest), checks)
		}
		for _, ch := range checks {
			survivor := ch.Kind == "Pod" && ch.ID == "pod1-uid"
			if ch.Absent == survivor {
				t.Errorf("%s %s: absent %v, %s", ch.Kind, ch.Name, ch.Absent, ch.Detail)
			}
			if survivor && !strings.Contains(ch.Detail, "still there") {
				t.Errorf("survivor's detail %q", ch.Detail)
			}
		}
	})

	t.Run("re-created with another UID", func(t *testing.T) {
		b, c, m, manifest := setup(t)
		deleteAll(t, b, m)
		// Someone else's Service and Secret under the member's names.
		for _, o := range []client.Object{
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: serviceName(m), UID: "new-svc-uid"}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: secretName(m), UID: "new-secret-uid"}},
		} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		checks := verify(t, b, m, manifest)
		if len(checks) != len(manifest)+1 {
			t.Fatalf("%d checks for %d resources: %+v", len(checks), len(manifest), checks)
		}
		for _, ch := range checks {
			if !ch.Absent {
				t.Errorf("%s %s not absent: %s", ch.Kind, ch.Name, ch.Detail)
			}
			if (ch.Kind == "Service" || ch.Kind == "Secret") && !strings.Contains(ch.Detail, "re-created with another UID") {
				t.Errorf("%s detail %q", ch.Kind, ch.Detail)
			}
		}
	})

	t.Run("an object not in the manifest", func(t *testing.T) {
		b, c, m, manifest := setup(t)
		deleteAll(t, b, m)
		late := &corev1.Pod{ObjectMeta: objectMeta(kobev1.BackendKubernetes, m, podName(m, 2))}
		late.UID = "pod2-uid"
		if err := c.Create(ctx, late); err != nil {
			t.Fatal(err)
		}
		checks := verify(t, b, m, manifest)
		if len(checks) != len(manifest)+2 {
			t.Fatalf("%d checks for %d resources, want one extra: %+v", len(checks), len(manifest), checks)
		}
		for _, ch := range checks[:len(manifest)] {
			if !ch.Absent {
				t.Errorf("%s %s not absent: %s", ch.Kind, ch.Name, ch.Detail)
			}
		}
		extra := checks[len(manifest)]
		want := kobev1.ManifestResource{Kind: "Pod", Name: "kobe/kobe-pool-ci-0-server-2", ID: "pod2-uid"}
		if extra.ManifestResource != want || extra.Absent || !strings.Contains(extra.Detail, "not in the creation manifest") {
			t.Errorf("extra check %+v, want %v present and not in the manifest", extra, want)
		}
		if !checks[len(checks)-1].Absent {
			t.Errorf("client CA not absent: %s", checks[len(checks)-1].Detail)
		}
	})

	t.Run("a kind it does not know", func(t *testing.T) {
		b, _, m, manifest := setup(t)
		deleteAll(t, b, m)
		manifest = append(manifest, kobev1.ManifestResource{Kind: "ConfigMap", Name: "kobe/x", ID: "cm-uid"})
		checks := verify(t, b, m, manifest)
		ch := checks[len(manifest)-1]
		if ch.Absent || !strings.Contains(ch.Detail, "cannot check") {
			t.Errorf("unknown kind: %+v", ch)
		}
	})
}

// TestVerifyAPIError: an API error other than NotFound proves nothing.
func TestVerifyAPIError(t *testing.T) {
	boom := apierrors.NewServiceUnavailable("host down")
	b, _, m := verifyFixture(t, &interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Pod); ok {
				return boom
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	manifest := []kobev1.ManifestResource{{Kind: "Pod", Name: "kobe/kobe-pool-ci-0-server-0", ID: "pod0-uid"}}
	checks, err := b.Verify(t.Context(), m, manifest)
	if !errors.Is(err, boom) || checks != nil {
		t.Fatalf("Verify = %v, %v; want no checks and the API error", checks, err)
	}
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("error %v does not unwrap to the API error", err)
	}
}
