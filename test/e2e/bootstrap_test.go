//go:build e2e && heavy

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// A bundle of a CRD, a namespace, a Deployment and an object of the CRD's
// kind: the Widget must wait until its CRD is served.
const (
	widgetsApp = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: kobe.local/pause:v1}]}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: first, namespace: shop}
spec: {size: 3}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: sync, namespace: shop}
data: {branch: $(params.branch), pool: $(pool.name), member: $(member.name)}
`
	// brokenDeployment has no selector: every API server refuses it.
	brokenDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: broken, namespace: default}
spec:
  replicas: 1
  template:
    metadata: {labels: {app: broken}}
    spec: {containers: [{name: c, image: kobe.local/pause:v1}]}
`
)

func createBundle(t *testing.T, name string, params []kobev1.BootstrapParameter, manifests ...kobev1.BootstrapManifest) {
	t.Helper()
	bc := &kobev1.BootstrapConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: kobev1.BootstrapConfigSpec{Manifests: manifests, Parameters: params}}
	if err := s.env.Client.Create(t.Context(), bc); err != nil {
		t.Fatalf("creating BootstrapConfig %s: %v", name, err)
	}
	t.Cleanup(func() { _ = s.env.Client.Delete(context.Background(), bc) })
}

// createPoolWith creates a local pool of size 1 with bootstraps and gates,
// and deletes it (waiting for its members to go) when the test ends.
func createPoolWith(t *testing.T, name string, bootstraps []kobev1.BootstrapRef, gates ...kobev1.ReadinessGate) {
	t.Helper()
	p := newPool(name, 1)
	p.Spec.Bootstraps = bootstraps
	p.Spec.ReadinessGates = gates
	if err := s.env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pool %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = s.env.Client.Delete(ctx, p)
		_ = testenv.Poll(ctx, 2*time.Minute, func() error {
			var l kobev1.ClusterInstanceList
			if err := s.env.Client.List(ctx, &l, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelPool: name}); err != nil {
				return err
			}
			if len(l.Items) > 0 {
				return fmt.Errorf("%d members of %s left", len(l.Items), name)
			}
			return nil
		})
	})
}

// TestBootstrapsAppliedBeforeHandOut: a member of a pool with a bundle of
// manifests is Ready only once they are applied, so the leased cluster
// already has the CRD, the Deployment and the CRD's object; the gates on
// them (CRDExists, BootstrapsComplete under its spec name AddonsReady) pass.
func TestBootstrapsAppliedBeforeHandOut(t *testing.T) {
	const pool = "boot"
	createBundle(t, "widgets", []kobev1.BootstrapParameter{{Name: "branch"}},
		kobev1.BootstrapManifest{Name: "20-app.yaml", Content: widgetsApp},
		kobev1.BootstrapManifest{Name: "10-crd.yaml", Content: testenv.WidgetsCRD})
	createPoolWith(t, pool, []kobev1.BootstrapRef{{Name: "widgets", Parameters: map[string]string{"branch": "release-1"}}},
		kobev1.ReadinessGate{Type: kobev1.GateAddonsReady},
		kobev1.ReadinessGate{Type: kobev1.GateCRDExists, Name: "WidgetsAPI", CRD: &kobev1.CRDGate{Name: "widgets.example.com"}})
	waitPoolReady(t, pool, 1)

	lease, kc := leaseCLI(t, pool, "--ttl", "10m")
	released := false
	t.Cleanup(func() {
		if !released { // other tests count the caller's active leases
			_ = s.env.Client.Delete(context.Background(), &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: lease.ID, Namespace: namespace}})
		}
	})
	for _, args := range [][]string{
		{"get", "crd", "widgets.example.com"},
		{"-n", "shop", "get", "deployment", "web"},
		{"-n", "shop", "get", "widgets.example.com", "first", "-o", "jsonpath={.spec.size}"},
		{"-n", "shop", "get", "configmap", "sync", "-o", "jsonpath={.data.branch} {.data.pool}"},
	} {
		out, err := testenv.Kubectl(t, kc, args...)
		if err != nil {
			t.Fatalf("kubectl %s with the lease's kubeconfig: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[len(args)-1] == "jsonpath={.spec.size}" && strings.TrimSpace(out) != "3" {
			t.Errorf("the bundle's Widget has size %q, want 3", out)
		}
		if args[len(args)-1] == "jsonpath={.data.branch} {.data.pool}" && strings.TrimSpace(out) != "release-1 "+pool {
			t.Errorf("the bundle's ConfigMap holds %q, want the pool's parameter and name %q", out, "release-1 "+pool)
		}
	}
	var members kobev1.ClusterInstanceList
	if err := s.env.Client.List(t.Context(), &members, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelPool: pool}); err != nil {
		t.Fatal(err)
	}
	leased := 0
	for _, m := range members.Items {
		if m.Spec.LeaseRef == nil || m.Spec.LeaseRef.Name != lease.ID {
			continue
		}
		leased++
		for _, c := range []string{kobev1.ConditionBootstrapsComplete, kobev1.GateAddonsReady, "WidgetsAPI"} {
			if cond := findCondition(m.Status.Conditions, c); cond == nil || cond.Status != metav1.ConditionTrue {
				t.Errorf("leased member %s: condition %s = %+v, want True", m.Name, c, cond)
			}
		}
	}
	if leased != 1 {
		t.Errorf("%d members name lease %s, want 1", leased, lease.ID)
	}
	if out, errOut, err := kobe(t, "release", lease.ID); err != nil {
		t.Errorf("kobe release %s: %v\n%s\n%s", lease.ID, err, out, errOut)
	}
	released = true
}

// TestBrokenBootstrapNeverWarms: a bundle the member refuses fails every
// member before it is Ready; the pool counts the failures, names the bundle
// and the document, and backs off.
func TestBrokenBootstrapNeverWarms(t *testing.T) {
	const pool = "boot-broken"
	createBundle(t, "broken", nil, kobev1.BootstrapManifest{Name: "app.yaml", Content: brokenDeployment})
	createPoolWith(t, pool, []kobev1.BootstrapRef{{Name: "broken"}})
	testenv.Eventually(t, memberDeadline, "the pool to report the broken bundle", func() error {
		p := getPool(t, pool)
		if p.Status.Ready != 0 || p.Status.Leased != 0 {
			t.Fatalf("a member of a pool with a broken bundle became Ready: %+v", p.Status)
		}
		lf := p.Status.LastFailure
		if p.Status.Failures < 1 || lf == nil {
			return errors.New("no failure counted yet")
		}
		if lf.Reason != kobev1.ReasonBootstrapFailed || !strings.Contains(lf.Message, "broken/app.yaml#1: the member refused Deployment broken") {
			return fmt.Errorf("lastFailure %+v", lf)
		}
		prov := findCondition(p.Status.Conditions, kobev1.ConditionProvisioning)
		if prov == nil || prov.Status != metav1.ConditionFalse || !strings.Contains(prov.Message, kobev1.ReasonBootstrapFailed) {
			return fmt.Errorf("Provisioning %+v", prov)
		}
		return nil
	})
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// TestJobBundleRefused: an operator without --bootstrap-jobs (make run's
// kind: a host with no nodes) runs no bootstrap Jobs, so a pool naming a
// bundle that runs one builds no member at all (rather than members that
// fail one after another), says why in its Capacity condition, and the API
// refuses its leases at once.
func TestJobBundleRefused(t *testing.T) {
	const pool = "boot-job"
	bc := &kobev1.BootstrapConfig{ObjectMeta: metav1.ObjectMeta{Name: "helm-install", Namespace: namespace},
		Spec: kobev1.BootstrapConfigSpec{Job: &kobev1.BootstrapJob{Image: "kobe.local/testapp:v1", Args: []string{"get"}}}}
	if err := s.env.Client.Create(t.Context(), bc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.env.Client.Delete(context.Background(), bc) })
	createPoolWith(t, pool, []kobev1.BootstrapRef{{Name: "helm-install"}})
	testenv.Eventually(t, 30*time.Second, "the pool to refuse the Job bundle", func() error {
		c := findCondition(getPool(t, pool).Status.Conditions, kobev1.ConditionCapacity)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kobev1.ReasonBootstrapJobsUnsupported ||
			!strings.Contains(c.Message, "BootstrapConfig helm-install runs a Job") {
			return fmt.Errorf("Capacity %+v", c)
		}
		return nil
	})
	code, body, _ := api(t, http.MethodPost, "/v1/leases", s.token, strings.NewReader(`{"pool": "`+pool+`", "ttl": "10m"}`))
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "runs a Job") {
		t.Errorf("POST /v1/leases of the pool: %d %s, want 503 naming the Job bundle", code, body)
	}
	var members kobev1.ClusterInstanceList
	if err := s.env.Client.List(t.Context(), &members, client.InNamespace(namespace), client.MatchingLabels{kobev1.LabelPool: pool}); err != nil {
		t.Fatal(err)
	}
	if len(members.Items) != 0 {
		t.Errorf("the pool built %d members for a bundle it cannot run", len(members.Items))
	}
}
