//go:build integration

package gates

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestResourceGates runs CRDExists, DeploymentReady and URLHealthy against a
// real API server standing in for a member: each fails while what it waits
// for is missing, says what is missing, and passes once it is there.
func TestResourceGates(t *testing.T) {
	env := testenv.Shared(t)
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := testenv.Scheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	eval := func(t *testing.T, g kobev1.ReadinessGate) Result {
		t.Helper()
		rs := Evaluate(t.Context(), kubeconfig, []kobev1.ReadinessGate{g}, nil, 5*time.Second)
		if len(rs) != 1 || rs[0].Name != g.Key() || !rs[0].Builtin {
			t.Fatalf("results %+v, want one built-in result named %s", rs, g.Key())
		}
		return rs[0]
	}
	expect := func(t *testing.T, r Result, pass bool, contains string) {
		t.Helper()
		if r.Passed != pass || !strings.Contains(r.Message, contains) {
			t.Errorf("%s: passed %v (%q), want %v with a message containing %q", r.Name, r.Passed, r.Message, pass, contains)
		}
	}

	t.Run("CRDExists", func(t *testing.T) {
		widgets := kobev1.ReadinessGate{Type: kobev1.GateCRDExists, Name: "WidgetsAPI", CRD: &kobev1.CRDGate{Name: "widgets.example.com"}}
		gadgets := kobev1.ReadinessGate{Type: kobev1.GateCRDExists, Name: "GadgetsAPI", CRD: &kobev1.CRDGate{Name: "gadgets.example.com"}}
		expect(t, eval(t, widgets), false, "CustomResourceDefinition widgets.example.com does not exist yet")

		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "example.com",
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
				Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
				}},
			},
		}
		if err := c.Create(t.Context(), crd); err != nil {
			t.Fatal(err)
		}
		removeWhenDone(t, c, crd)
		testenv.Eventually(t, 30*time.Second, "the CRD to be Established", func() error {
			if r := eval(t, widgets); !r.Passed {
				return fmt.Errorf("%s", r.Message)
			}
			return nil
		})
		// Two gates of one type are told apart by their names.
		rs := Evaluate(t.Context(), kubeconfig, []kobev1.ReadinessGate{widgets, gadgets}, nil, 5*time.Second)
		if len(rs) != 2 || rs[0].Name != "WidgetsAPI" || !rs[0].Passed || rs[1].Name != "GadgetsAPI" || rs[1].Passed {
			t.Errorf("two CRDExists gates: %+v", rs)
		}
	})

	t.Run("DeploymentReady", func(t *testing.T) {
		ns := env.NewNamespace(t)
		g := kobev1.ReadinessGate{Type: kobev1.GateDeploymentReady, Deployment: &kobev1.DeploymentGate{Namespace: ns, Name: "ingress"}}
		expect(t, eval(t, g), false, "Deployment "+ns+"/ingress does not exist yet")

		labels := map[string]string{"app": "ingress"}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "ingress", Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "kobe.local/pause:v1"}}},
				},
			},
		}
		if err := c.Create(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		// This API server runs no deployment controller: the test writes
		// the status that one would, step by step.
		expect(t, eval(t, g), false, "its controller has not yet observed generation 1")
		setStatus := func(st appsv1.DeploymentStatus) {
			t.Helper()
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), d); err != nil {
				t.Fatal(err)
			}
			st.ObservedGeneration = d.Generation
			st.ReadyReplicas = st.AvailableReplicas // the API server requires ready >= available
			d.Status = st
			if err := c.Status().Update(t.Context(), d); err != nil {
				t.Fatal(err)
			}
		}
		setStatus(appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1})
		expect(t, eval(t, g), false, "1 of 2 replicas updated")
		setStatus(appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 2})
		expect(t, eval(t, g), false, "1 old replicas still running")
		setStatus(appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1})
		expect(t, eval(t, g), false, "1 of 2 replicas available")
		setStatus(appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2})
		expect(t, eval(t, g), true, "passed")

		// A new spec the controller has not seen yet is not rolled out.
		d.Spec.Template.Labels["rev"] = "2"
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
		d.Spec.Template.Spec.Containers[0].Image = "kobe.local/pause:v2"
		if err := c.Update(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		expect(t, eval(t, g), false, "has not yet observed generation 2")
		setStatus(appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "ingress-2" has timed out progressing.`,
		}}})
		expect(t, eval(t, g), false, "exceeded its progress deadline")
	})

	t.Run("URLHealthy", func(t *testing.T) {
		status := http.StatusServiceUnavailable
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		defer srv.Close()
		g := kobev1.ReadinessGate{Type: kobev1.GateURLHealthy, Name: "AppHealthy", URL: srv.URL + "/healthz"}
		expect(t, eval(t, g), false, "answered 503 Service Unavailable")
		status = http.StatusNoContent
		expect(t, eval(t, g), true, "passed")

		// A password in the URL never reaches a message.
		withPassword := strings.Replace(srv.URL, "http://", "http://probe:s3cret@", 1)
		status = http.StatusInternalServerError
		r := eval(t, kobev1.ReadinessGate{Type: kobev1.GateURLHealthy, URL: withPassword})
		expect(t, r, false, "answered 500")
		if strings.Contains(r.Message, "s3cret") {
			t.Errorf("message shows the URL's password: %q", r.Message)
		}
		srv.Close()
		r = eval(t, kobev1.ReadinessGate{Type: kobev1.GateURLHealthy, URL: withPassword})
		expect(t, r, false, "connection refused")
		if strings.Contains(r.Message, "s3cret") {
			t.Errorf("message shows the URL's password: %q", r.Message)
		}
	})

	t.Run("a dead API server fails the member gates, not URLHealthy", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
		defer srv.Close()
		dead := strings.Replace(string(kubeconfig), strings.TrimSuffix(env.Config.Host, "/"), "https://127.0.0.1:1", 1)
		rs := Evaluate(t.Context(), []byte(dead), []kobev1.ReadinessGate{
			{Type: kobev1.GateAPIServerReachable},
			{Type: kobev1.GateCRDExists, CRD: &kobev1.CRDGate{Name: "widgets.example.com"}},
			{Type: kobev1.GateURLHealthy, URL: srv.URL},
		}, nil, 2*time.Second)
		if rs[0].Passed || rs[1].Passed || !strings.Contains(rs[1].Message, "waiting for APIServerReachable") || !rs[2].Passed {
			t.Errorf("results %+v", rs)
		}
	})
}
