package accesspolicy

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const ns = "kobe-system"

func TestController(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	policy := func(name string, a kobev1.AuthSpec) *kobev1.AccessPolicy {
		p := &kobev1.AccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       kobev1.AccessPolicySpec{Auth: a, Rules: []kobev1.AccessRule{{Pools: []string{"*"}}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// update applies edit to the latest version of p.
	update := func(p *kobev1.AccessPolicy, edit func()) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			edit()
			return c.Update(ctx, p)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// waitReady waits until the policy's Ready condition describes its
	// current generation with the wanted status and reason.
	waitReady := func(name string, status metav1.ConditionStatus, reason string, message ...string) *metav1.Condition {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var last *kobev1.AccessPolicy
		for time.Now().Before(deadline) {
			var p kobev1.AccessPolicy
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				t.Fatal(err)
			}
			last = &p
			cond := meta.FindStatusCondition(p.Status.Conditions, kobev1.ConditionReady)
			if cond != nil && cond.Status == status && cond.Reason == reason &&
				p.Status.ObservedGeneration == p.Generation && cond.ObservedGeneration == p.Generation &&
				(len(message) == 0 || strings.Contains(cond.Message, message[0])) {
				return cond
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("policy %s never reached Ready=%s/%s; status %+v", name, status, reason, last.Status)
		return nil
	}

	t.Run("token Secret missing, then created", func(t *testing.T) {
		policy("static", kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "static-token"}}})
		cond := waitReady("static", metav1.ConditionFalse, kobev1.ReasonSecretNotFound)
		if !strings.Contains(cond.Message, "static-token") {
			t.Fatalf("message %q does not name the Secret", cond.Message)
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "static-token", Namespace: ns},
			Data:       map[string][]byte{"other": []byte("top-secret-value")},
		}
		if err := c.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		cond = waitReady("static", metav1.ConditionFalse, kobev1.ReasonSecretNotFound, `no non-empty key "token"`)
		if strings.Contains(cond.Message, "top-secret-value") {
			t.Fatalf("message %q", cond.Message)
		}
		secret.Data["token"] = []byte("top-secret-value")
		if err := c.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		cond = waitReady("static", metav1.ConditionTrue, kobev1.ReasonPolicyReady)
		if strings.Contains(cond.Message, "top-secret-value") {
			t.Fatal("condition leaks the token")
		}
		if err := c.Delete(ctx, secret); err != nil {
			t.Fatal(err)
		}
		waitReady("static", metav1.ConditionFalse, kobev1.ReasonSecretNotFound)
	})

	t.Run("oidc issuer reachable and unreachable", func(t *testing.T) {
		var issuer *httptest.Server
		issuer = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/.well-known/openid-configuration":
				_ = json.NewEncoder(w).Encode(map[string]any{"issuer": issuer.URL, "jwks_uri": issuer.URL + "/keys"})
			case "/keys":
				_, _ = w.Write([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","kid":"1"}]}`))
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(issuer.Close)
		policy("github", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: issuer.URL, Audience: []string{"kobe"}}})
		waitReady("github", metav1.ConditionTrue, kobev1.ReasonPolicyReady)

		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + l.Addr().String()
		_ = l.Close()
		policy("dead-issuer", kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: dead, Audience: []string{"kobe"}}})
		waitReady("dead-issuer", metav1.ConditionFalse, kobev1.ReasonIssuerUnreachable)
	})

	t.Run("invalid policy", func(t *testing.T) {
		p := policy("keys", kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{"not-a-key"}}})
		waitReady("keys", metav1.ConditionFalse, kobev1.ReasonPolicyInvalid)
		// Fixing it is a new generation, observed by the next status.
		update(p, func() {
			p.Spec.Auth.SSH.AuthorizedKeys = []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRmuvfsbh0/RgpTwpETIDbA45qwQAJXcPYrdFw8XO11 alice"}
		})
		waitReady("keys", metav1.ConditionTrue, kobev1.ReasonPolicyReady)

		bad := policy("template", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{}})
		update(bad, func() { bad.Spec.Identity = "{unclosed" })
		cond := waitReady("template", metav1.ConditionFalse, kobev1.ReasonPolicyInvalid)
		if !strings.Contains(cond.Message, "identity") {
			t.Fatalf("message %q", cond.Message)
		}
	})
}

func TestRequeueAfter(t *testing.T) {
	now := time.Date(2026, 4, 9, 12, 0, 0, 0, time.UTC)
	down := verdict{reason: kobev1.ReasonIssuerUnreachable, recheck: true}
	since := func(d time.Duration) *metav1.Condition {
		return &metav1.Condition{Reason: kobev1.ReasonIssuerUnreachable, LastTransitionTime: metav1.NewTime(now.Add(-d))}
	}
	cases := []struct {
		name string
		v    verdict
		prev *metav1.Condition
		want time.Duration
	}{
		{"not rechecked", verdict{ready: true, reason: kobev1.ReasonPolicyReady}, nil, 0},
		{"reachable issuer", verdict{ready: true, reason: kobev1.ReasonPolicyReady, recheck: true}, nil, issuerRecheck},
		{"first failure", down, nil, minIssuerRetry},
		{"was ready", down, &metav1.Condition{Reason: kobev1.ReasonPolicyReady}, minIssuerRetry},
		{"down 1s", down, since(time.Second), minIssuerRetry},
		{"down 40s", down, since(40 * time.Second), 40 * time.Second},
		{"down an hour", down, since(time.Hour), maxIssuerRetry},
	}
	for _, tc := range cases {
		if got := requeueAfter(tc.v, tc.prev, now); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
