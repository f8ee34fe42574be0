//go:build integration

package addressguard

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// countingListener accepts and drops connections on the host's loopback,
// counting them: any connection is the API server reaching outside its
// member.
func countingListener(t *testing.T) (port int32, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	conns = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			_ = c.Close()
		}
	}()
	return int32(ln.Addr().(*net.TCPAddr).Port), conns
}

// A holder points a webhook and an aggregated API at an ExternalName
// Service naming the host's loopback. With APIServerFlags the API server
// resolves Services through their endpoints only, so it never dials the
// name; without them (the cluster-IP resolver) it dials localhost.
func TestServicesAreReachedOnlyThroughEndpoints(t *testing.T) {
	c, cfg := startGuardedWithConfig(t)
	ctx := context.Background()
	port, conns := countingListener(t)

	ext := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "loopback", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if err := c.Create(ctx, ext); err != nil {
		t.Fatalf("creating an ExternalName Service: %v", err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hooked"}}); err != nil {
		t.Fatal(err)
	}

	t.Run("admission webhook", func(t *testing.T) {
		none, fail, timeout := admissionv1.SideEffectClassNone, admissionv1.Fail, int32(3)
		path := "/"
		hook := &admissionv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "via-externalname"},
			Webhooks: []admissionv1.ValidatingWebhook{{
				Name: "x.example.com",
				ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{
					Namespace: "default", Name: "loopback", Port: &port, Path: &path,
				}},
				Rules: []admissionv1.RuleWithOperations{{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}},
				NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "hooked"}},
				FailurePolicy:           &fail,
				SideEffects:             &none,
				TimeoutSeconds:          &timeout,
				AdmissionReviewVersions: []string{"v1"},
			}},
		}
		if err := c.Create(ctx, hook); err != nil {
			t.Fatalf("creating a webhook naming the Service: %v", err)
		}
		// The webhook configuration reaches the API server's cache within
		// a second or so: create ConfigMaps until one is refused by the
		// failing call, or time runs out.
		var err error
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + strconv.Itoa(i), Namespace: "hooked"}}
			if err = c.Create(ctx, cm); err != nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err == nil {
			t.Fatal("the webhook was never called")
		}
		if !strings.Contains(err.Error(), "x.example.com") {
			t.Errorf("ConfigMap refused for another reason than the webhook call: %v", err)
		}
		t.Logf("the webhook call failed as it should: %v", err)
		if n := conns.Load(); n != 0 {
			t.Errorf("the API server connected %d time(s) to localhost:%d through an ExternalName Service", n, port)
		}
		_ = c.Delete(ctx, hook)
	})

	t.Run("aggregated API", func(t *testing.T) {
		apiService := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1",
			"kind":       "APIService",
			"metadata":   map[string]any{"name": "v1.pwn.example.com"},
			"spec": map[string]any{
				"group": "pwn.example.com", "version": "v1",
				"service":               map[string]any{"namespace": "default", "name": "loopback", "port": int64(port)},
				"insecureSkipTLSVerify": true,
				"groupPriorityMinimum":  int64(1000),
				"versionPriority":       int64(15),
			},
		}}
		if err := c.Create(ctx, apiService); err != nil {
			t.Fatalf("creating an APIService naming the Service: %v", err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The availability controller checks the APIService at once and
		// a request for its group is proxied: both must fail without a
		// connection.
		for range 10 {
			if body, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/pwn.example.com/v1").DoRaw(ctx); err == nil {
				t.Errorf("the aggregated API answered: %.200s", body)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if n := conns.Load(); n != 0 {
			t.Errorf("the API server connected %d time(s) to localhost:%d through an aggregated API", n, port)
		}
		_ = c.Delete(ctx, apiService, client.PropagationPolicy(metav1.DeletePropagationBackground))
	})
}
