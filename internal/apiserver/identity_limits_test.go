//go:build integration

package apiserver_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/testenv/oidcissuer"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// Identity and limits, tried as a hostile caller would: each
// test adds its own policies (with audiences no other test uses) and its
// own pool, and removes them when it ends.

// addPolicies creates objs (policies and their Secrets) and deletes them
// at the end of the test.
func addPolicies(t *testing.T, objs ...client.Object) {
	t.Helper()
	c := fx.env.Client
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := c.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", o.GetName(), err)
			}
		})
	}
}

// editRules replaces the rules of policy name.
func editRules(t *testing.T, name string, rules ...kobev1.AccessRule) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p kobev1.AccessPolicy
		if err := fx.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		p.Spec.Rules = rules
		return fx.env.Client.Update(t.Context(), &p)
	})
	if err != nil {
		t.Fatalf("editing policy %s: %v", name, err)
	}
}

// waitWhoAmI waits until creds authenticate as a principal that ok accepts
// (the manager's cache has seen a policy or its edit).
func waitWhoAmI(t *testing.T, creds apiclient.Credentials, what string, ok func(wire.WhoAmI) bool) {
	t.Helper()
	eventually(t, what, func(context.Context) bool {
		w, got := tryDecode[wire.WhoAmI](prepare(t, creds, http.MethodGet, "/v1/whoami", nil))
		return got && ok(w)
	})
}

// oidcToken signs a token of the trusted test issuer for audience with
// claims (iss, aud, iat, nbf and exp are filled in).
func oidcToken(t *testing.T, audience string, claims map[string]any) apiclient.BearerToken {
	t.Helper()
	now := time.Now()
	c := map[string]any{"iss": fx.issuer.URL, "aud": audience, "iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	for k, v := range claims {
		c[k] = v
	}
	return apiclient.BearerToken(oidcissuer.MustSign(t, fx.oidcKey, oidcKID, jose.RS256, c))
}

// oidcPolicy renders an OIDC policy trusting the test issuer for audience.
func oidcPolicy(name, identity, audience string, rules ...kobev1.AccessRule) *kobev1.AccessPolicy {
	return policy(name, identity, kobev1.AuthSpec{OIDC: &kobev1.OIDCAuth{Issuer: fx.issuer.URL, Audience: []string{audience}}}, rules...)
}

// certNotAfter is the NotAfter of the client certificate in kubeconfig.
func certNotAfter(t *testing.T, kubeconfig string) time.Time {
	t.Helper()
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	block, _ := pem.Decode(user.ClientCertificateData)
	if block == nil {
		t.Fatal("kubeconfig has no client certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.NotAfter
}

// memberBoundAt is the boundAt the member of lease id recorded (its
// write-once leaseRef), from which the lease's limits count.
func memberBoundAt(t *testing.T, id string) time.Time {
	t.Helper()
	obj := recordedLease(t, id)
	inst := &kobev1.ClusterInstance{}
	if err := fx.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: obj.Status.InstanceRef.Name}, inst); err != nil {
		t.Fatal(err)
	}
	if inst.Spec.LeaseRef == nil || inst.Spec.LeaseRef.BoundAt == nil {
		t.Fatalf("member %s records no boundAt: %+v", inst.Name, inst.Spec.LeaseRef)
	}
	return inst.Spec.LeaseRef.BoundAt.Time
}

// forgeStatus edits lease id's status as anyone with clusterleases/status
// could.
func forgeStatus(t *testing.T, id string, edit func(*kobev1.ClusterLeaseStatus)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := leaseObject(t, id)
		edit(&l.Status)
		return fx.env.Client.Status().Update(t.Context(), l)
	})
	if err != nil {
		t.Fatalf("forging the status of %s: %v", id, err)
	}
}

// ownLeaseIDs lists the ids GET /v1/leases shows creds.
func ownLeaseIDs(t *testing.T, creds apiclient.Credentials) []string {
	t.Helper()
	ls := decode[[]wire.Lease](t, call(t, creds, http.MethodGet, "/v1/leases", nil), http.StatusOK)
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.ID)
	}
	slices.Sort(ids)
	return ids
}

// requireNoAccess shows that intruder can neither see, extend nor release
// the lease id of another owner: GET and PATCH answer 404 exactly as for a
// lease that does not exist, DELETE 204 and leaves it Bound and unchanged,
// and the intruder's listing does not show it.
func requireNoAccess(t *testing.T, intruder apiclient.Credentials, id string) {
	t.Helper()
	before := leaseObject(t, id)
	for _, tc := range []struct {
		method string
		body   any
	}{{http.MethodGet, nil}, {http.MethodPatch, wire.ExtendLeaseRequest{ExtendTTL: "30m"}}} {
		r := call(t, intruder, tc.method, "/v1/leases/"+id, tc.body)
		requireReason(t, requireError(t, r, http.StatusNotFound, "lease not found", id), wire.ReasonLeaseNotFound)
	}
	if r := call(t, intruder, http.MethodDelete, "/v1/leases/"+id, nil); r.code != http.StatusNoContent {
		t.Fatalf("DELETE of another owner's lease: %s; want 204", r)
	}
	if slices.Contains(ownLeaseIDs(t, intruder), id) {
		t.Fatalf("another owner's lease %s is listed", id)
	}
	requireBoundUntouched(t, id, before)
}

// TestSameIdentityUnderTwoPolicies replays the observed attack: the demo
// token policy (identity "demo") and an OIDC policy rendering "{sub}",
// with a token whose sub is "demo". Both render the identity "demo"; they
// are still two owners, who cannot see (GET, list, alias), extend or
// release each other's leases.
func TestSameIdentityUnderTwoPolicies(t *testing.T) {
	makeHangupPool(t, "idl-owners", 4)
	demo := tokenPolicy("idl-demo", kobev1.AccessRule{Pools: []string{"idl-*"}})
	demo[1].(*kobev1.AccessPolicy).Spec.Identity = "demo"
	addPolicies(t, append(demo, oidcPolicy("idl-sub", "{sub}", "kobe-idl-sub",
		kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: "sub", Value: "demo"}, Pools: []string{"idl-*"}}))...)
	token := tokenOf("idl-demo")
	jwt := oidcToken(t, "kobe-idl-sub", map[string]any{"sub": "demo"})
	for _, creds := range []apiclient.Credentials{token, jwt} {
		waitWhoAmI(t, creds, "both policies in the cache", func(w wire.WhoAmI) bool { return w.Identity == "demo" })
	}

	create := func(creds apiclient.Credentials) wire.Lease {
		t.Helper()
		r := call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "idl-owners", Alias: "shared"})
		l := decode[wire.Lease](t, r, http.StatusCreated)
		recordedLease(t, l.ID)
		return l
	}
	byToken, byOIDC := create(token), create(jwt)
	for id, policy := range map[string]string{byToken.ID: "idl-demo", byOIDC.ID: "idl-sub"} {
		if got := leaseObject(t, id).Spec.Requester; got.Identity != "demo" || got.Policy != policy {
			t.Fatalf("lease %s requester %+v, want identity demo under policy %s", id, got, policy)
		}
	}

	t.Run("OIDC sub=demo against the token caller's lease", func(t *testing.T) { requireNoAccess(t, jwt, byToken.ID) })
	t.Run("token caller against the OIDC lease", func(t *testing.T) { requireNoAccess(t, token, byOIDC.ID) })
	t.Run("each lists only its own", func(t *testing.T) {
		if got := ownLeaseIDs(t, token); !slices.Equal(got, []string{byToken.ID}) {
			t.Errorf("token caller lists %v, want [%s]", got, byToken.ID)
		}
		if got := ownLeaseIDs(t, jwt); !slices.Equal(got, []string{byOIDC.ID}) {
			t.Errorf("OIDC caller lists %v, want [%s]", got, byOIDC.ID)
		}
	})
	t.Run("one alias, two owners", func(t *testing.T) {
		for creds, want := range map[apiclient.Credentials]string{token: byToken.ID, jwt: byOIDC.ID} {
			if got := decode[wire.Lease](t, call(t, creds, http.MethodGet, "/v1/leases/shared", nil), http.StatusOK); got.ID != want {
				t.Errorf("alias shared resolves to %s, want the caller's own %s", got.ID, want)
			}
		}
		// Releasing by alias ends the caller's own lease only.
		if r := call(t, jwt, http.MethodDelete, "/v1/leases/shared", nil); r.code != http.StatusNoContent {
			t.Fatalf("DELETE own alias: %s", r)
		}
		if p := leaseObject(t, byOIDC.ID).Status.Phase; p != kobev1.LeaseReleased {
			t.Errorf("OIDC lease is %s after its owner released it", p)
		}
		if p := leaseObject(t, byToken.ID).Status.Phase; p != kobev1.LeaseBound {
			t.Errorf("token caller's lease is %s after the OIDC caller released its alias", p)
		}
	})
}

// TestForgedClaimSeparator: under "{repository}:{ref}" a caller whose
// repository claim holds the separator cannot render another caller's
// identity; a template whose claims touch is refused.
func TestForgedClaimSeparator(t *testing.T) {
	makeHangupPool(t, "idl-pair", 2)
	addPolicies(t,
		oidcPolicy("idl-pair", "{repository}:{ref}", "kobe-idl-pair", kobev1.AccessRule{MatchAny: true, Pools: []string{"idl-*"}}),
		oidcPolicy("idl-adjacent", "{repository}{ref}", "kobe-idl-adjacent", kobev1.AccessRule{MatchAny: true, Pools: []string{"idl-*"}}),
	)
	victim := oidcToken(t, "kobe-idl-pair", map[string]any{"repository": "team", "ref": "deploy:prod"})
	forger := oidcToken(t, "kobe-idl-pair", map[string]any{"repository": "team:deploy", "ref": "prod"})
	waitWhoAmI(t, victim, "policy idl-pair in the cache", func(w wire.WhoAmI) bool { return w.Policy == "idl-pair" })

	v := createLease(t, victim, "idl-pair", "")
	if got := leaseObject(t, v.ID).Spec.Requester.Identity; got != "team:deploy%3Aprod" {
		t.Fatalf("victim's identity %q, want the ref's ':' escaped", got)
	}
	w := decode[wire.WhoAmI](t, call(t, forger, http.MethodGet, "/v1/whoami", nil), http.StatusOK)
	if w.Identity != "team%3Adeploy:prod" {
		t.Fatalf("forger's identity %q", w.Identity)
	}
	requireNoAccess(t, forger, v.ID)

	adjacent := oidcToken(t, "kobe-idl-adjacent", map[string]any{"repository": "team", "ref": "x"})
	before := leaseObjects(t)
	r := call(t, adjacent, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "idl-pair"})
	requireError(t, r, http.StatusForbidden, "not authorised", "must be separated by literal text")
	requireNoNewLease(t, before)
}

// TestRuleWithoutMatchAdmitsNoToken: an OIDC or ServiceAccount rule
// without match would admit every token the issuer signs; it admits none
// until it says matchAny: true.
func TestRuleWithoutMatchAdmitsNoToken(t *testing.T) {
	makeHangupPool(t, "idl-open", 2)
	addPolicies(t,
		oidcPolicy("idl-open", "{sub}", "kobe-idl-open", kobev1.AccessRule{Pools: []string{"idl-*"}}),
		policy("idl-open-sa", "", kobev1.AuthSpec{ServiceAccount: &kobev1.ServiceAccountAuth{Audiences: []string{"kobe-idl-open-sa"}}},
			kobev1.AccessRule{Pools: []string{"idl-*"}}),
	)
	tr, err := fx.kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), "intruder", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{"kobe-idl-open-sa"}, ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		policy string
		creds  apiclient.Credentials
	}{
		{"oidc", "idl-open", oidcToken(t, "kobe-idl-open", map[string]any{"sub": "anyone-the-issuer-signs"})},
		{"serviceAccount", "idl-open-sa", apiclient.BearerToken(tr.Status.Token)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Refused once the cache holds the policy; until then it is a 401.
			eventually(t, "a 403 from policy "+tc.policy, func(context.Context) bool {
				r, err := roundTrip(prepare(t, tc.creds, http.MethodGet, "/v1/whoami", nil))
				return err == nil && r.code == http.StatusForbidden && strings.Contains(string(r.body), "no rule of policy "+tc.policy)
			})
			before := leaseObjects(t)
			r := call(t, tc.creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "idl-open"})
			requireError(t, r, http.StatusForbidden, "not authorised", "no rule of policy "+tc.policy)
			requireNoNewLease(t, before)

			editRules(t, tc.policy, kobev1.AccessRule{MatchAny: true, Pools: []string{"idl-*"}})
			waitWhoAmI(t, tc.creds, "matchAny in the cache", func(w wire.WhoAmI) bool { return w.Policy == tc.policy })
			createLease(t, tc.creds, "idl-open", "")
		})
	}
}

// TestDefaultMaxTTL: under a rule without maxTtl a TTL beyond the default
// maximum (24h) is clamped exactly as a rule's maxTtl clamps, and so is
// each extension.
func TestDefaultMaxTTL(t *testing.T) {
	addPolicies(t, tokenPolicy("idl-nomax", kobev1.AccessRule{Pools: []string{"ci-large"}})...)
	creds := tokenOf("idl-nomax")
	waitWhoAmI(t, creds, "policy idl-nomax in the cache", func(w wire.WhoAmI) bool { return w.Policy == "idl-nomax" })
	if w := decode[wire.WhoAmI](t, call(t, creds, http.MethodGet, "/v1/whoami", nil), http.StatusOK); w.MaxTTL != wire.FormatTTL(auth.DefaultMaxTTL) {
		t.Fatalf("whoami max_ttl %q, want the default maximum that applies", w.MaxTTL)
	}

	l := createLease(t, creds, "ci-large", "1000h")
	if want := wire.FormatTTL(auth.DefaultMaxTTL); l.EffectiveTTL != want {
		t.Fatalf("effective_ttl %q, want the default maximum %q", l.EffectiveTTL, want)
	}
	obj := leaseObject(t, l.ID)
	if obj.Spec.TTL.Duration != auth.DefaultMaxTTL || obj.Spec.MaxTTL == nil || obj.Spec.MaxTTL.Duration != auth.DefaultMaxTTL {
		t.Fatalf("lease spec ttl %v maxTtl %v, want both %s", obj.Spec.TTL, obj.Spec.MaxTTL, auth.DefaultMaxTTL)
	}
	if got := l.ExpiresAt.Sub(*l.BoundAt); got != auth.DefaultMaxTTL {
		t.Fatalf("expires_at - bound_at = %s, want %s", got, auth.DefaultMaxTTL)
	}
	ext := decode[wire.ExtendLeaseResponse](t, call(t, creds, http.MethodPatch, "/v1/leases/"+l.ID, wire.ExtendLeaseRequest{ExtendTTL: "1000h"}), http.StatusOK)
	if got := ext.ExpiresAt.Sub(*l.ExpiresAt); got != auth.DefaultMaxTTL {
		t.Fatalf("an extension of 1000h added %s, want %s", got, auth.DefaultMaxTTL)
	}
	if got := certNotAfter(t, ext.Kubeconfig); !got.Equal(*ext.ExpiresAt) {
		t.Fatalf("certificate NotAfter %s, want the new expiry %s", got, ext.ExpiresAt)
	}
}

// TestExtendRechecksTheRule: an extension is clamped to the max TTL of the
// rule the lease was created under even when the rule now allows more, to
// the current rule when it allows less, and refused (403) once the current
// rule no longer grants the lease's pool.
func TestExtendRechecksTheRule(t *testing.T) {
	makeHangupPool(t, "idl-recheck", 2)
	const name = "idl-recheck"
	addPolicies(t, tokenPolicy(name, kobev1.AccessRule{Pools: []string{"idl-*"}, MaxTTL: &metav1.Duration{Duration: 10 * time.Minute}, MaxExtensions: ptr.To[int32](5)})...)
	creds := tokenOf(name)
	waitWhoAmI(t, creds, "policy in the cache", func(w wire.WhoAmI) bool { return w.Policy == name })
	l := createLease(t, creds, "idl-recheck", "5m")
	path := "/v1/leases/" + l.ID
	expires := *l.ExpiresAt
	extend := func(by string) time.Duration {
		t.Helper()
		ext := decode[wire.ExtendLeaseResponse](t, call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: by}), http.StatusOK)
		added := ext.ExpiresAt.Sub(expires)
		expires = *ext.ExpiresAt
		return added
	}

	editRules(t, name, kobev1.AccessRule{Pools: []string{"idl-*", "more"}, MaxTTL: &metav1.Duration{Duration: 5 * time.Hour}, MaxExtensions: ptr.To[int32](5)})
	waitWhoAmI(t, creds, "the longer maxTtl in the cache", func(w wire.WhoAmI) bool { return slices.Contains(w.Pools, "more") })
	if got := extend("2h"); got != 10*time.Minute {
		t.Errorf("rule now allows 5h: extension added %s, want the 10m of the rule the lease was created under", got)
	}

	editRules(t, name, kobev1.AccessRule{Pools: []string{"idl-*"}, MaxTTL: &metav1.Duration{Duration: time.Minute}, MaxExtensions: ptr.To[int32](5)})
	waitWhoAmI(t, creds, "the shorter maxTtl in the cache", func(w wire.WhoAmI) bool { return !slices.Contains(w.Pools, "more") })
	if got := extend("2h"); got != time.Minute {
		t.Errorf("rule now allows 1m: extension added %s, want 1m", got)
	}

	editRules(t, name, kobev1.AccessRule{Pools: []string{"idl-*"}, MaxExtensions: ptr.To[int32](2)})
	waitWhoAmI(t, creds, "maxExtensions 2 in the cache", func(w wire.WhoAmI) bool { return w.MaxExtensions == 2 })
	before := leaseObject(t, l.ID)
	r := call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "1m"})
	requireReason(t, requireError(t, r, http.StatusConflict, "extension limit reached", "allows 2 extensions"), wire.ReasonExtensionLimitReached)
	requireBoundUntouched(t, l.ID, before)

	editRules(t, name, kobev1.AccessRule{Pools: []string{"dev"}, MaxExtensions: ptr.To[int32](5)})
	waitWhoAmI(t, creds, "the pool taken away in the cache", func(w wire.WhoAmI) bool { return slices.Equal(w.Pools, []string{"dev"}) })
	r = call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "1m"})
	requireReason(t, requireError(t, r, http.StatusForbidden, "pool not allowed", `no longer grants pool "idl-recheck"`), wire.ReasonPoolNotAllowed)
	requireBoundUntouched(t, l.ID, before)
}

// TestExpiredLeaseCannotBeExtended: once its expiry has passed a lease is
// not brought back by an extension, nor by a later expiresAt written into
// its status: no kubeconfig either way.
func TestExpiredLeaseCannotBeExtended(t *testing.T) {
	makeHangupPool(t, "idl-expired", 2)
	addPolicies(t, tokenPolicy("idl-expired", kobev1.AccessRule{Pools: []string{"idl-*"}})...)
	creds := tokenOf("idl-expired")
	waitWhoAmI(t, creds, "policy in the cache", func(w wire.WhoAmI) bool { return w.Policy == "idl-expired" })
	l := createLease(t, creds, "idl-expired", "2s")
	path := "/v1/leases/" + l.ID
	// No controller runs here: the lease stays Bound past its expiry.
	eventually(t, "the lease's expiry to pass", func(context.Context) bool { return time.Now().After(l.ExpiresAt.Add(time.Second)) })

	before := leaseObject(t, l.ID)
	r := call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "1h"})
	requireReason(t, requireError(t, r, http.StatusConflict, "lease has expired", ""), wire.ReasonExtensionRefused)
	requireBoundUntouched(t, l.ID, before)
	if got := decode[wire.Lease](t, call(t, creds, http.MethodGet, path, nil), http.StatusOK); got.Kubeconfig != "" {
		t.Fatal("an expired lease got a kubeconfig")
	}

	far := metav1.NewTime(time.Now().Add(100 * time.Hour))
	forgeStatus(t, l.ID, func(st *kobev1.ClusterLeaseStatus) { st.ExpiresAt = &far })
	got := decode[wire.Lease](t, call(t, creds, http.MethodGet, path, nil), http.StatusOK)
	if got.Kubeconfig != "" || got.ExpiresAt.After(l.ExpiresAt.Add(time.Second)) {
		t.Fatalf("with a forged expiry the lease shows expires_at %s and a kubeconfig: %v", got.ExpiresAt, got.Kubeconfig != "")
	}
	r = call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "1h"})
	requireError(t, r, http.StatusConflict, "lease has expired", "")
}

// TestForgedExpiryDoesNotLengthenAccess: a status.expiresAt (and
// extension count, and boundAt) written later than the lease can last, as
// anyone with clusterleases/status could, changes neither the expires_at
// the owner sees nor the certificate's NotAfter: both stay within the
// member's boundAt + ttl + granted extensions, each at most the rule's
// max TTL.
func TestForgedExpiryDoesNotLengthenAccess(t *testing.T) {
	makeHangupPool(t, "idl-forge", 2)
	addPolicies(t, tokenPolicy("idl-forge", kobev1.AccessRule{Pools: []string{"idl-*"}, MaxTTL: &metav1.Duration{Duration: time.Hour}, MaxExtensions: ptr.To[int32](1)})...)
	creds := tokenOf("idl-forge")
	waitWhoAmI(t, creds, "policy in the cache", func(w wire.WhoAmI) bool { return w.Policy == "idl-forge" })
	l := createLease(t, creds, "idl-forge", "10m")
	path := "/v1/leases/" + l.ID
	boundAt := memberBoundAt(t, l.ID)
	far := metav1.NewTime(time.Now().Add(100 * time.Hour))
	later := metav1.NewTime(time.Now().Add(50 * time.Hour))

	check := func(t *testing.T, want time.Time) {
		t.Helper()
		got := decode[wire.Lease](t, call(t, creds, http.MethodGet, path, nil), http.StatusOK)
		if got.Kubeconfig == "" || !got.ExpiresAt.Equal(want) {
			t.Fatalf("expires_at %s (kubeconfig %v), want %s", got.ExpiresAt, got.Kubeconfig != "", want)
		}
		if got.BoundAt == nil || !got.BoundAt.Equal(boundAt) {
			t.Fatalf("bound_at %v, want the member's %s, not the forged %s", got.BoundAt, boundAt, later.Time)
		}
		if notAfter := certNotAfter(t, got.Kubeconfig); !notAfter.Equal(want) {
			t.Fatalf("certificate NotAfter %s, want %s, not the forged %s", notAfter, want, far.Time)
		}
	}
	t.Run("later expiry, no extension granted", func(t *testing.T) {
		forgeStatus(t, l.ID, func(st *kobev1.ClusterLeaseStatus) { st.ExpiresAt, st.BoundAt = &far, &later })
		check(t, boundAt.Add(10*time.Minute))
	})
	t.Run("later expiry and extensions beyond the cap", func(t *testing.T) {
		forgeStatus(t, l.ID, func(st *kobev1.ClusterLeaseStatus) { st.ExpiresAt, st.Extensions = &far, 7 })
		check(t, boundAt.Add(10*time.Minute+time.Hour))
		r := call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "5h"})
		requireError(t, r, http.StatusConflict, "extension limit reached", "")
	})
	t.Run("an extension on top of a forged expiry", func(t *testing.T) {
		forgeStatus(t, l.ID, func(st *kobev1.ClusterLeaseStatus) { st.ExpiresAt, st.Extensions = &far, 0 })
		ext := decode[wire.ExtendLeaseResponse](t, call(t, creds, http.MethodPatch, path, wire.ExtendLeaseRequest{ExtendTTL: "5h"}), http.StatusOK)
		want := boundAt.Add(10*time.Minute + time.Hour)
		if !ext.ExpiresAt.Equal(want) || !certNotAfter(t, ext.Kubeconfig).Equal(want) {
			t.Fatalf("extended to %s, certificate until %s; want both %s", ext.ExpiresAt, certNotAfter(t, ext.Kubeconfig), want)
		}
		if obj := leaseObject(t, l.ID); !obj.Status.ExpiresAt.Time.Equal(want) {
			t.Fatalf("stored expiresAt %s, want %s", obj.Status.ExpiresAt, want)
		}
		check(t, want)
	})
}
