//go:build integration

package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/replay"
	"github.com/kunobi-ninja/kobe/internal/sshsig"
	"github.com/kunobi-ninja/kobe/internal/sshsig/sshsigtest"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
)

// countingReviewer counts the TokenReviews that reach the API server.
type countingReviewer struct {
	TokenReviewer
	calls atomic.Int32
}

func (c *countingReviewer) Create(ctx context.Context, r *authnv1.TokenReview, o metav1.CreateOptions) (*authnv1.TokenReview, error) {
	c.calls.Add(1)
	return c.TokenReviewer.Create(ctx, r, o)
}

// TestAgainstAPIServer runs the methods that read the API server (token
// Secrets, TokenReview) and live policy edits against a real kube-apiserver.
func TestAgainstAPIServer(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	c := env.Client
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{testNS, "ci"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	reviewer := &countingReviewer{TokenReviewer: kube.AuthenticationV1().TokenReviews()}
	// The direct client reads the API server on every call, so an edit is
	// visible to the very next request.
	a := NewAuthenticator(Options{Reader: c, Namespace: testNS, TokenReviewer: reviewer})

	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
			}
		}
	}

	t.Run("no credentials", func(t *testing.T) {
		if _, err := authenticate(t, a, ""); !errors.Is(err, ErrNoCredentials) {
			t.Fatalf("got %v", err)
		}
		if _, err := authenticate(t, a, "Basic dXNlcjpwYXNz"); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("basic auth: got %v", err)
		}
	})

	t.Run("token", func(t *testing.T) {
		create(
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ci-token", Namespace: testNS}, Data: map[string][]byte{"token": []byte("s3cret-one\n")}},
			newPolicy("static-ci", "", kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "ci-token"}}}, allow("ci-*")),
			newPolicy("static-missing", "", kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "absent", Key: "k"}}}, allow("*")),
		)
		p, err := authenticate(t, a, "Bearer s3cret-one")
		if err != nil {
			t.Fatal(err)
		}
		if p.Identity != "static-ci" || p.Method != MethodToken || !p.AllowsPool("ci-x") {
			t.Fatalf("principal %+v", p)
		}
		for _, bad := range []string{"s3cret-on", "s3cret-one2", "S3CRET-ONE", "x"} {
			_, err := authenticate(t, a, "Bearer "+bad)
			if !errors.Is(err, ErrInvalidCredentials) || strings.Contains(err.Error(), bad) {
				t.Fatalf("token %q: got %v", bad, err)
			}
		}

		// Rotation: the next request compares with the new value.
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "ci-token"}, &s); err != nil {
			t.Fatal(err)
		}
		s.Data["token"] = []byte("s3cret-two")
		if err := c.Update(ctx, &s); err != nil {
			t.Fatal(err)
		}
		if _, err := authenticate(t, a, "Bearer s3cret-one"); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("old token after rotation: %v", err)
		}
		if _, err := authenticate(t, a, "Bearer s3cret-two"); err != nil {
			t.Fatalf("new token after rotation: %v", err)
		}

		// The Secret gone: nobody authenticates with it (fail closed).
		if err := c.Delete(ctx, &s); err != nil {
			t.Fatal(err)
		}
		if _, err := authenticate(t, a, "Bearer s3cret-two"); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("token without Secret: %v", err)
		}
	})

	t.Run("serviceAccount", func(t *testing.T) {
		create(
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: "ci"}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: "ci"}},
			newPolicy("in-cluster", "",
				kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{"kobe"}}},
				kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: "sub", Value: "system:serviceaccount:ci:deployer"}, Pools: []string{"ci-*"}, MaxConcurrentLeases: ptr.To[int32](2)},
			),
		)
		token := func(sa, audience string) string {
			t.Helper()
			tr, err := kube.CoreV1().ServiceAccounts("ci").CreateToken(ctx, sa, &authnv1.TokenRequest{
				Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return tr.Status.Token
		}
		deployer := token("deployer", "kobe")

		before := reviewer.calls.Load()
		p, err := authenticate(t, a, "Bearer "+deployer)
		if err != nil {
			t.Fatal(err)
		}
		if p.Identity != "system:serviceaccount:ci:deployer" || p.Method != MethodServiceAccount || p.Policy != "in-cluster" || !p.AllowsPool("ci-a") {
			t.Fatalf("principal %+v", p)
		}
		if n, ok := p.MaxConcurrentLeases(); !ok || n != 2 {
			t.Fatalf("maxConcurrentLeases %d %v", n, ok)
		}
		if _, err := authenticate(t, a, "Bearer "+deployer); err != nil {
			t.Fatal(err)
		}
		if got := reviewer.calls.Load() - before; got != 1 {
			t.Fatalf("%d TokenReviews for two requests with one token, want 1 (cached)", got)
		}

		if _, err := authenticate(t, a, "Bearer "+token("intruder", "kobe")); !errors.Is(err, ErrNoMatchingRule) {
			t.Fatalf("other ServiceAccount: got %v, want ErrNoMatchingRule", err)
		}
		if _, err := authenticate(t, a, "Bearer "+token("deployer", "someone-else")); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("token for another audience: got %v, want ErrInvalidCredentials", err)
		}
		t.Run("a flood of one refused token costs one TokenReview", func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Now())
			flooded := NewAuthenticator(Options{Reader: c, Namespace: testNS, TokenReviewer: reviewer, Clock: clk})
			// A real ServiceAccount token, but for an audience the policy
			// does not accept: TokenReview refuses it.
			bad := "Bearer " + token("deployer", "someone-else")
			before := reviewer.calls.Load()
			var wg sync.WaitGroup
			var accepted atomic.Int32
			for range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := authenticate(t, flooded, bad); !errors.Is(err, ErrInvalidCredentials) {
						accepted.Add(1)
					}
				}()
			}
			wg.Wait()
			for range 50 {
				if _, err := authenticate(t, flooded, bad); !errors.Is(err, ErrInvalidCredentials) {
					accepted.Add(1)
				}
			}
			if accepted.Load() != 0 {
				t.Fatalf("%d requests with the refused token were not refused", accepted.Load())
			}
			if got := reviewer.calls.Load() - before; got != 1 {
				t.Fatalf("%d TokenReviews for 100 requests with one refused token, want 1", got)
			}
			// The refusal does not rub off on a good token.
			if _, err := authenticate(t, flooded, "Bearer "+deployer); err != nil {
				t.Fatalf("good token during the flood: %v", err)
			}
			// After the refusal TTL the token is reviewed again, once.
			before = reviewer.calls.Load()
			clk.SetTime(clk.Now().Add(DefaultRefusalCacheTTL + time.Second))
			for range 5 {
				if _, err := authenticate(t, flooded, bad); !errors.Is(err, ErrInvalidCredentials) {
					t.Fatalf("refused token after the TTL: %v", err)
				}
			}
			if got := reviewer.calls.Load() - before; got != 1 {
				t.Fatalf("%d TokenReviews after the refusal expired, want 1", got)
			}
		})

		// A JWT that is no ServiceAccount token.
		forged := oidcissuer.Unsigned(map[string]any{"iss": "https://kubernetes.default.svc", "sub": "system:serviceaccount:ci:deployer"})
		if _, err := authenticate(t, a, "Bearer "+forged); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("forged token: got %v", err)
		}
	})

	t.Run("an SSH request is accepted by one replica only", func(t *testing.T) {
		agent := sshsigtest.StartAgent(t)
		keyPath, pub := agent.Keygen("ed25519", "alice@laptop")
		agent.Add(keyPath)
		create(newPolicy("ssh-users", "", kobev1.AuthSpec{SSH: &kobev1.SSHAuth{AuthorizedKeys: []string{pub}}}, allow("dev")))
		// Two replicas: each its own client, nonce store and authenticator,
		// sharing only the API server, as two operator processes do.
		replica := func() *Authenticator {
			t.Helper()
			rc, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
			if err != nil {
				t.Fatal(err)
			}
			return NewAuthenticator(Options{
				Reader: rc, Namespace: testNS, SSHAudience: testAudience,
				SSHNonces: &replay.Store{Client: rc, Namespace: testNS},
			})
		}
		first, second := replica(), replica()
		body := []byte(`{"pool":"dev"}`)
		hdr := signFor(t, agent.Signer(pub), testAudience, "https://kobe.example.com", "POST", "/v1/leases", body, time.Now())
		send := func(a *Authenticator) (*Principal, error) {
			r := httptest.NewRequest("POST", "/v1/leases", bytes.NewReader(body))
			r.Header.Set("Authorization", hdr)
			return a.Authenticate(ctx, r, body)
		}
		if p, err := send(first); err != nil || p.Identity != "alice@laptop" {
			t.Fatalf("first replica: %+v, %v", p, err)
		}
		for name, a := range map[string]*Authenticator{"the other replica": second, "the same replica": first} {
			if p, err := send(a); !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), "already used") {
				t.Fatalf("replayed to %s: got %+v, %v; want refused as already used", name, p, err)
			}
		}
		// The nonce is one object in the namespace, named by its hash.
		h, err := sshsig.ParseHeader(hdr)
		if err != nil {
			t.Fatal(err)
		}
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: replay.Name(sshsig.NonceID(h))}, &l); err != nil {
			t.Fatalf("nonce object: %v", err)
		}
		// It outlives the window of a replica lagging by a window, no more.
		signedAt := time.Unix(h.Timestamp, 0)
		if exp, ok := replay.Expiry(&l); !ok || exp.Before(signedAt.Add(2*sshsig.DefaultWindow)) || exp.After(time.Now().Add(2*sshsig.DefaultWindow+2*time.Second)) {
			t.Fatalf("nonce object expires at %v, want two windows after the signature (%v)", exp, signedAt)
		}

		// Refused signatures claim no nonce: a caller without a trusted key
		// or a valid signature cannot make the server write.
		strangerPath, strangerPub := agent.Keygen("ed25519", "stranger@laptop")
		agent.Add(strangerPath)
		for name, hdr := range map[string]string{
			"unknown key":    signFor(t, agent.Signer(strangerPub), testAudience, "https://kobe.example.com", "POST", "/v1/leases", body, time.Now()),
			"tampered body":  signFor(t, agent.Signer(pub), testAudience, "https://kobe.example.com", "POST", "/v1/leases", []byte(`{"pool":"prod"}`), time.Now()),
			"other audience": signFor(t, agent.Signer(pub), "kobe:elsewhere", "https://kobe.example.com", "POST", "/v1/leases", body, time.Now()),
		} {
			r := httptest.NewRequest("POST", "/v1/leases", bytes.NewReader(body))
			r.Header.Set("Authorization", hdr)
			if _, err := second.Authenticate(ctx, r, body); !errors.Is(err, ErrInvalidCredentials) {
				t.Fatalf("%s: got %v, want refused", name, err)
			}
			h, err := sshsig.ParseHeader(hdr)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: replay.Name(sshsig.NonceID(h))}, &coordinationv1.Lease{})
			if !apierrors.IsNotFound(err) {
				t.Fatalf("%s: the refused signature's nonce object: %v, want NotFound", name, err)
			}
		}
	})

	t.Run("policy edits apply to the next request", func(t *testing.T) {
		create(
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "edit-token", Namespace: testNS}, Data: map[string][]byte{"t": []byte("edit-me")}},
			newPolicy("editable", "", kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "edit-token", Key: "t"}}},
				allow("small")),
		)
		p, err := authenticate(t, a, "Bearer edit-me")
		if err != nil || !p.AllowsPool("small") || p.AllowsPool("big") {
			t.Fatalf("before edit: %+v %v", p, err)
		}
		edit := func(rules ...kobev1.AccessRule) {
			t.Helper()
			var pol kobev1.AccessPolicy
			if err := c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "editable"}, &pol); err != nil {
				t.Fatal(err)
			}
			pol.Spec.Rules = rules
			if err := c.Update(ctx, &pol); err != nil {
				t.Fatal(err)
			}
		}
		edit(allowIf("sub", "someone-else", "small"))
		if _, err := authenticate(t, a, "Bearer edit-me"); !errors.Is(err, ErrNoMatchingRule) {
			t.Fatalf("after restricting: got %v", err)
		}
		edit(allowIf("sub", "editable", "big"), allow("small"))
		p, err = authenticate(t, a, "Bearer edit-me")
		if err != nil || !p.AllowsPool("big") || p.AllowsPool("small") || p.RuleIndex != 0 {
			t.Fatalf("after widening: %+v %v", p, err)
		}
	})

	t.Run("methods", func(t *testing.T) {
		got := a.Methods()
		want := []string{MethodServiceAccount, MethodSSH, MethodToken}
		if !slices.Equal(got, want) {
			t.Fatalf("Methods() = %v, want %v", got, want)
		}
	})

	t.Run("cached reader", func(t *testing.T) {
		// The operator reads through the manager's informer cache; a policy
		// created after start shows up there within moments.
		cached := newCachedReader(t, env)
		ca := NewAuthenticator(Options{Reader: cached, Namespace: testNS, TokenReviewer: reviewer})
		create(
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "late-token", Namespace: testNS}, Data: map[string][]byte{"token": []byte("late")}},
			newPolicy("late", "", kobev1.AuthSpec{Token: &kobev1.TokenAuth{SecretRef: kobev1.SecretKeyRef{Name: "late-token"}}}, allow("x")),
		)
		testenv.Eventually(t, 10*time.Second, "the cache to serve the new policy", func() error {
			p, err := authenticate(t, ca, "Bearer late")
			if err != nil {
				return err
			}
			if p.Policy != "late" {
				return fmt.Errorf("authenticated by policy %q", p.Policy)
			}
			return nil
		})
	})
}

// newCachedReader is the informer cache of a manager on testNS, as the
// operator reads through.
func newCachedReader(t *testing.T, env *testenv.Env) client.Reader {
	t.Helper()
	mgr := env.NewManager(t, testNS)
	testenv.StartManager(t, mgr)
	return mgr.GetCache()
}
