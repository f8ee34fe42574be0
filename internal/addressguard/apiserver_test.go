//go:build integration

package addressguard

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// The member of these tests: pods in 198.18.128.0/22, nodes on
// 198.19.192.0/24 whose .1 is the host, the API server at .1:6443.
var member = Ranges{
	Pods:      []netip.Prefix{netip.MustParsePrefix("198.18.128.0/22"), netip.MustParsePrefix("198.19.192.0/24")},
	Nodes:     []netip.Prefix{netip.MustParsePrefix("198.19.192.0/24")},
	Host:      netip.MustParseAddr("198.19.192.1"),
	APIServer: netip.MustParseAddrPort("198.19.192.1:6443"),
}

// startGuarded starts a real kube-apiserver that loads the policy from its
// static manifests directory, as members' API servers do, and returns a
// system:masters client.
func startGuarded(t *testing.T) client.Client {
	t.Helper()
	c, _ := startGuardedWithConfig(t)
	return c
}

func startGuardedWithConfig(t *testing.T) (client.Client, *rest.Config) {
	t.Helper()
	dir := t.TempDir()
	manifests := filepath.Join(dir, "policies")
	if err := os.Mkdir(manifests, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := Policy(member)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manifests, "addresses.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionPolicy
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ValidatingAdmissionPolicyConfiguration
    staticManifestsDir: %q
`, manifests)), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{"admission-control-config-file": config}
	for _, f := range APIServerFlags() {
		name, value, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		flags[name] = value
	}
	env, stop, err := testenv.NewWith(dir, testenv.Options{APIServerFlags: flags})
	if err != nil {
		t.Fatalf("starting kube-apiserver with the policy: %v", err)
	}
	t.Cleanup(func() { _ = stop() })
	scheme := testenv.Scheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// env.Config is system:masters: what a lease holder has.
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, env.Config
}

// refused fails the test unless err is the policy's refusal.
func refused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted, want refused by %s", what, PolicyName)
		return
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "member") {
		t.Errorf("%s: %v, want the policy's refusal", what, err)
	}
}

func admitted(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want admitted", what, err)
	}
}

func TestHolderCannotPointTheAPIServerOutsideItsMember(t *testing.T) {
	c := startGuarded(t)
	ctx := context.Background()

	t.Run("pod status", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "ssrf", Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{"nowhere": "true"},
				Containers:   []corev1.Container{{Name: "c", Image: "pause"}},
			},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		for _, ip := range []string{"10.0.0.1", "93.184.216.34", "198.19.192.1", "fd00:ec2::254"} {
			patch := fmt.Sprintf(`{"status":{"podIP":%q,"podIPs":[{"ip":%q}]}}`, ip, ip)
			refused(t, "pods/status podIP "+ip, c.Status().Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch))))
		}
		// Only podIPs, as a forged status may give it alone.
		refused(t, "pods/status podIPs only", c.Status().Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"status":{"podIPs":[{"ip":"10.0.0.1"}]}}`))))
		admitted(t, "pods/status with a member pod IP", c.Status().Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(`{"status":{"podIP":"198.18.129.7","podIPs":[{"ip":"198.18.129.7"}]}}`))))
	})

	t.Run("node addresses", func(t *testing.T) {
		for _, ip := range []string{"10.1.2.3", "198.19.192.1", "169.254.169.254"} {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fake-" + strings.NewReplacer(".", "-", ":", "-").Replace(ip)}}
			if err := c.Create(ctx, n); err != nil {
				t.Fatal(err)
			}
			patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q}]}}`, ip)
			refused(t, "nodes/status InternalIP "+ip, c.Status().Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(patch))))
			n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-x"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: ip}}}}
			refused(t, "node created with ExternalIP "+ip, c.Create(ctx, n2))
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real"}}
		admitted(t, "node", c.Create(ctx, n))
		admitted(t, "nodes/status with a member node IP", c.Status().Patch(ctx, n, client.RawPatch(types.MergePatchType, []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"198.19.192.10"},{"type":"Hostname","address":"real"}]}}`))))
	})

	//nolint:staticcheck // the attack writes Endpoints, deprecated but still served
	t.Run("endpoints", func(t *testing.T) {
		ep := func(ns, name, ip string, port int32) *corev1.Endpoints {
			return &corev1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Subsets: []corev1.EndpointSubset{{
					Addresses: []corev1.EndpointAddress{{IP: ip}},
					Ports:     []corev1.EndpointPort{{Port: port}},
				}},
			}
		}
		refused(t, "Endpoints to 10.0.0.1", c.Create(ctx, ep("default", "outside", "10.0.0.1", 443)))
		notReady := ep("default", "notready", "198.18.128.5", 80)
		notReady.Subsets[0].NotReadyAddresses = []corev1.EndpointAddress{{IP: "192.168.1.1"}}
		refused(t, "Endpoints with a notReadyAddress outside", c.Create(ctx, notReady))
		admitted(t, "Endpoints to a member pod", c.Create(ctx, ep("default", "inside", "198.18.128.5", 80)))

		// default/kubernetes names the API server and nothing else, not
		// even another port of the host.
		kube := &corev1.Endpoints{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, kube); apierrors.IsNotFound(err) {
			admitted(t, "default/kubernetes at the API server", c.Create(ctx, ep("default", "kubernetes", "198.19.192.1", 6443)))
		} else if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []*corev1.Endpoints{ep("default", "kubernetes", "198.19.192.1", 8090), ep("default", "kubernetes", "10.0.0.1", 6443)} {
			err := c.Get(ctx, client.ObjectKeyFromObject(bad), kube)
			if err == nil {
				bad.ResourceVersion = kube.ResourceVersion
				err = c.Update(ctx, bad)
			} else if apierrors.IsNotFound(err) {
				err = c.Create(ctx, bad)
			}
			refused(t, fmt.Sprintf("default/kubernetes to %s:%d", bad.Subsets[0].Addresses[0].IP, bad.Subsets[0].Ports[0].Port), err)
		}
	})

	t.Run("endpointslices", func(t *testing.T) {
		port := int32(80)
		slice := func(name string, typ discoveryv1.AddressType, addr string) *discoveryv1.EndpointSlice {
			return &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
				AddressType: typ,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
				Ports:       []discoveryv1.EndpointPort{{Port: &port}},
			}
		}
		refused(t, "EndpointSlice of FQDNs", c.Create(ctx, slice("fqdn", discoveryv1.AddressTypeFQDN, "metadata.google.internal")))
		refused(t, "EndpointSlice to 10.0.0.1", c.Create(ctx, slice("outside", discoveryv1.AddressTypeIPv4, "10.0.0.1")))
		admitted(t, "EndpointSlice to a member pod", c.Create(ctx, slice("inside", discoveryv1.AddressTypeIPv4, "198.18.130.9")))
		// What the EndpointSlice controller writes for a Service without
		// ready pods: endpoints and ports null (found by the conformance
		// suite: such Services never got a slice).
		empty := slice("no-ready-pods", discoveryv1.AddressTypeIPv4, "")
		empty.Endpoints, empty.Ports = nil, nil
		admitted(t, "an EndpointSlice whose endpoints and ports are null", c.Create(ctx, empty))
		kubeEmpty := slice("kube-empty", discoveryv1.AddressTypeIPv4, "")
		kubeEmpty.Labels[discoveryv1.LabelServiceName] = "kubernetes"
		kubeEmpty.Endpoints, kubeEmpty.Ports = nil, nil
		admitted(t, "an EndpointSlice of default/kubernetes whose endpoints and ports are null", c.Create(ctx, kubeEmpty))
		kube := slice("kube-forged", discoveryv1.AddressTypeIPv4, "198.19.192.1")
		kube.Labels[discoveryv1.LabelServiceName] = "kubernetes"
		other := int32(8090)
		kube.Ports[0].Port = &other
		refused(t, "an EndpointSlice of default/kubernetes to another port of the host", c.Create(ctx, kube))
	})

	t.Run("services", func(t *testing.T) {
		// ExternalName Services are admitted (upstream conformance wants
		// them): with APIServerFlags the API server never dials their
		// names (TestServicesAreReachedOnlyThroughEndpoints).
		admitted(t, "ExternalName Service", c.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "default"},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "metadata.google.internal"},
		}))
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
		admitted(t, "ClusterIP Service", c.Create(ctx, svc))
	})

	t.Run("webhooks", func(t *testing.T) {
		url := "https://127.0.0.1:8090/v1/leases"
		none := admissionv1.SideEffectClassNone
		hook := func(name string, cc admissionv1.WebhookClientConfig) *admissionv1.ValidatingWebhookConfiguration {
			return &admissionv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionv1.ValidatingWebhook{{
					Name: "x.example.com", ClientConfig: cc, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
				}},
			}
		}
		refused(t, "validating webhook with a URL", c.Create(ctx, hook("url", admissionv1.WebhookClientConfig{URL: &url})))
		refused(t, "mutating webhook with a URL", c.Create(ctx, &admissionv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "url"},
			Webhooks: []admissionv1.MutatingWebhook{{
				Name: "x.example.com", ClientConfig: admissionv1.WebhookClientConfig{URL: &url}, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			}},
		}))
		admitted(t, "webhook naming a Service", c.Create(ctx, hook("svc", admissionv1.WebhookClientConfig{
			Service: &admissionv1.ServiceReference{Namespace: "default", Name: "web"},
		})))
	})

	t.Run("conversion webhooks", func(t *testing.T) {
		url := "https://10.0.0.1/convert"
		crd := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "example.com",
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
				Scope: apiextensionsv1.NamespaceScoped,
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
					Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object"}},
				}},
				Conversion: &apiextensionsv1.CustomResourceConversion{
					Strategy: apiextensionsv1.WebhookConverter,
					Webhook: &apiextensionsv1.WebhookConversion{
						ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url},
						ConversionReviewVersions: []string{"v1"},
					},
				},
			},
		}
		refused(t, "CRD with a conversion webhook URL", c.Create(ctx, crd))
	})
}
