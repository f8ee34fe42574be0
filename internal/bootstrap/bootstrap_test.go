//go:build integration

package bootstrap

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

func bundle(name string, manifests ...kobev1.BootstrapManifest) *kobev1.BootstrapConfig {
	return &kobev1.BootstrapConfig{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kobev1.BootstrapConfigSpec{Manifests: manifests}}
}

var widgetCRD = testenv.WidgetsCRD

const app = `apiVersion: v1
kind: Namespace
metadata: {name: app}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: app}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: kobe.local/pause:v1}]}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: first, namespace: app}
spec: {size: 3}
`

func TestDocuments(t *testing.T) {
	objs, err := Documents(bundle("b", kobev1.BootstrapManifest{Name: "20-app.yaml", Content: app},
		kobev1.BootstrapManifest{Name: "10-crd.yaml", Content: "---\n" + widgetCRD + "---\n"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Source+" "+o.GetKind()+"/"+o.GetName())
	}
	want := "b/10-crd.yaml#1 CustomResourceDefinition/widgets.example.com,b/20-app.yaml#1 Namespace/app,b/20-app.yaml#2 Deployment/web,b/20-app.yaml#3 Widget/first"
	if strings.Join(got, ",") != want {
		t.Errorf("documents:\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
	if d := definedKinds(objs); !d[schema.GroupKind{Group: "example.com", Kind: "Widget"}] || len(d) != 1 {
		t.Errorf("definedKinds = %v", d)
	}

	for _, tc := range []struct{ name, content, want string }{
		{"not YAML", "kind: [", "b/m#1: not YAML or JSON"},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}", "b/m#1: apiVersion and kind are required"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}", "b/m#1: ConfigMap has no metadata.name"},
		{"a list", "apiVersion: v1\nkind: ConfigMapList\nmetadata: {name: x}\nitems: []", "b/m#1: ConfigMapList: list the items as documents of their own"},
		{"the second document", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\nkind: ConfigMap", "b/m#2: apiVersion and kind are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Documents(bundle("b", kobev1.BootstrapManifest{Name: "m", Content: tc.content}), nil)
			var inv *InvalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want an InvalidError containing %q", err, tc.want)
			}
		})
	}
}

// TestApply applies bundles to a real API server standing in for a member.
func TestApply(t *testing.T) {
	env := testenv.Start(t)
	objs, err := Documents(bundle("b", kobev1.BootstrapManifest{Name: "10-crd.yaml", Content: widgetCRD}, kobev1.BootstrapManifest{Name: "20-app.yaml", Content: app}), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The Widget may have to wait for its CRD to be served; never longer.
	testenv.Eventually(t, 30*time.Second, "the bundle to apply", func() error {
		err := Apply(t.Context(), env.Config, objs)
		if err != nil && !errors.Is(err, ErrWaiting) {
			t.Fatalf("Apply: %v", err)
		}
		return err
	})
	d := &appsv1.Deployment{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: "app", Name: "web"}, d); err != nil {
		t.Fatalf("the bundle's Deployment: %v", err)
	}
	if owners := d.GetManagedFields(); len(owners) == 0 || owners[0].Manager != FieldManager {
		t.Errorf("Deployment managed by %+v, want %s", owners, FieldManager)
	}
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: "app", Name: "first"}, w); err != nil {
		t.Fatalf("the bundle's Widget: %v", err)
	}
	// Applying again changes nothing and fails nothing.
	if err := Apply(t.Context(), env.Config, objs); err != nil {
		t.Errorf("second Apply: %v", err)
	}

	for _, tc := range []struct{ name, content, want string }{
		{"an object the member refuses", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: broken, namespace: app}\nspec: {replicas: 1}",
			"bad/m#1: the member refused Deployment broken"},
		{"a kind nothing defines", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}",
			"bad/m#1: the member serves no example.com/v1, Kind=Gadget, and no CustomResourceDefinition of the bundles defines it"},
		{"a namespace nothing creates", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: nowhere}",
			"bad/m#1: ConfigMap c: namespace nowhere does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Documents(bundle("bad", kobev1.BootstrapManifest{Name: "m", Content: tc.content}), nil)
			if err != nil {
				t.Fatal(err)
			}
			err = Apply(t.Context(), env.Config, objs)
			var inv *InvalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want an InvalidError containing %q", err, tc.want)
			}
		})
	}
}

// TestParameters: $(params.NAME) and the built-ins are replaced in string
// values only (a value can never add a field or a document), escaped
// references are kept literally, a container's $(VAR) is left to
// Kubernetes, and every way to get a parameter wrong fails the bundle with
// a message naming it.
func TestParameters(t *testing.T) {
	dflt := "main"
	bc := bundle("flux", kobev1.BootstrapManifest{Name: "sync.yaml", Content: `apiVersion: v1
kind: ConfigMap
metadata:
  name: sync-$(pool.name)
  namespace: default
  labels: {member: $(member.name)}
data:
  branch: $(params.branch)
  url: "https://git.example.com/$(params.repo).git"
  literal: $$(params.branch)
  script: 'echo $(HOME) $$(HOME)'
  $(params.branch): key untouched
`})
	bc.Spec.Parameters = []kobev1.BootstrapParameter{{Name: "branch", Default: &dflt}, {Name: "repo"}}
	m := Member{Name: "pool-dev-3", Namespace: "kobe-system", Pool: "dev"}

	vals, err := Resolve(bc, kobev1.BootstrapRef{Name: "flux", Parameters: map[string]string{"repo": "shop\nkind: Secret"}}, m)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Documents(bc, vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("%d objects, want 1", len(objs))
	}
	o := objs[0]
	data, _, _ := unstructured.NestedStringMap(o.Object, "data")
	want := map[string]string{
		"branch": "main", "url": "https://git.example.com/shop\nkind: Secret.git", "literal": "$(params.branch)",
		"script": "echo $(HOME) $$(HOME)", "$(params.branch)": "key untouched",
	}
	for k, v := range want {
		if data[k] != v {
			t.Errorf("data[%q] = %q, want %q", k, data[k], v)
		}
	}
	if o.GetName() != "sync-dev" || o.GetLabels()["member"] != "pool-dev-3" || o.GetKind() != "ConfigMap" {
		t.Errorf("built-ins not substituted: name %q labels %v kind %s", o.GetName(), o.GetLabels(), o.GetKind())
	}

	for _, tc := range []struct {
		name   string
		passed map[string]string
		params []kobev1.BootstrapParameter
		says   string
	}{
		{"a required parameter not passed", nil, bc.Spec.Parameters, "parameters repo have no default"},
		{"a parameter the bundle does not declare", map[string]string{"repo": "x", "brnach": "dev"}, bc.Spec.Parameters, "passes parameters brnach, which the bundle does not declare"},
		{"a reference the bundle does not declare", map[string]string{"branch": "x"}, []kobev1.BootstrapParameter{{Name: "branch"}}, "$(params.repo) is not defined"},
		{"an unknown built-in", nil, nil, "$(member.uid) is not defined"},
	} {
		b := bc.DeepCopy()
		b.Spec.Parameters = tc.params
		if tc.params == nil {
			b.Spec.Manifests[0].Content = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {uid: $(member.uid)}\n"
		}
		vals, err := Resolve(b, kobev1.BootstrapRef{Name: "flux", Parameters: tc.passed}, m)
		if err == nil {
			_, err = Documents(b, vals)
		}
		var invalid *InvalidError
		if !errors.As(err, &invalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an InvalidError saying %q", tc.name, err, tc.says)
		}
	}
}

// TestRenderJob: a Job bundle runs its image with the member's kubeconfig
// mounted read-only, its references substituted in the arguments and its
// parameters in the environment, no ServiceAccount token, no retry, and
// its timeout as the deadline, owned by the member; a new bundle version is
// a new Job.
func TestRenderJob(t *testing.T) {
	bc := &kobev1.BootstrapConfig{ObjectMeta: metav1.ObjectMeta{Name: "helm", Namespace: "kobe-system"},
		Spec: kobev1.BootstrapConfigSpec{
			Job:        &kobev1.BootstrapJob{Image: "tools:1", Args: []string{"install", "--branch=$(params.branch)", "$(KEEP)"}, Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
			Parameters: []kobev1.BootstrapParameter{{Name: "branch"}},
		}}
	m := JobMember{Member: Member{Name: "pool-ci-0", Namespace: "kobe-system", Pool: "ci"}, UID: "uid-0", Kubeconfig: []byte("kc")}
	vals, err := Resolve(bc, kobev1.BootstrapRef{Name: "helm", Parameters: map[string]string{"branch": "main"}}, m.Member)
	if err != nil {
		t.Fatal(err)
	}
	job, secret, err := RenderJob(bc, "d1", m, vals)
	if err != nil {
		t.Fatal(err)
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	switch {
	case strings.Join(c.Args, " ") != "install --branch=main $(KEEP)":
		t.Errorf("args %q", c.Args)
	case env["KOBE_PARAM_branch"] != "main" || env["KUBECONFIG"] != KubeconfigPath || env["KOBE_POOL"] != "ci" || env["KOBE_MEMBER"] != "pool-ci-0":
		t.Errorf("env %v", env)
	case pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken:
		t.Error("the Job's pod gets a ServiceAccount token of the host cluster")
	case *job.Spec.BackoffLimit != 0 || *job.Spec.ActiveDeadlineSeconds != 120 || pod.RestartPolicy != "Never":
		t.Errorf("backoffLimit %d deadline %d restart %s", *job.Spec.BackoffLimit, *job.Spec.ActiveDeadlineSeconds, pod.RestartPolicy)
	case string(secret.Data[KubeconfigKey]) != "kc" || pod.Volumes[0].Secret.SecretName != secret.Name || !c.VolumeMounts[0].ReadOnly:
		t.Errorf("kubeconfig Secret %s mounted as %+v", secret.Name, pod.Volumes)
	case job.Labels[kobev1.LabelMemberUID] != "uid-0" || job.Spec.Template.Labels[kobev1.LabelBootstrapFor] != "uid-0":
		t.Errorf("labels %v, pod labels %v", job.Labels, job.Spec.Template.Labels)
	}
	// The member owns both, so they go with it even when no operator
	// deletes them.
	for _, obj := range []metav1.Object{job, secret} {
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].APIVersion != kobev1.GroupVersion.String() || refs[0].Kind != "ClusterInstance" ||
			refs[0].Name != "pool-ci-0" || refs[0].UID != "uid-0" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%T %s owner references %+v, want the member's ClusterInstance as controller", obj, obj.GetName(), refs)
		}
	}
	if again, _, _ := RenderJob(bc, "d1", m, vals); again.Name != job.Name {
		t.Error("the same bundle version renders Jobs of two names")
	}
	if next, _, _ := RenderJob(bc, "d2", m, vals); next.Name == job.Name {
		t.Error("a new bundle version renders the old Job's name")
	}
	bc.Spec.Job.Args = []string{"$(params.nope)"}
	var invalid *InvalidError
	if _, _, err := RenderJob(bc, "d1", m, vals); !errors.As(err, &invalid) {
		t.Errorf("an undefined reference in the args: %v, want an InvalidError", err)
	}
}
