//go:build integration

package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestLivePolicies edits and deletes an AccessPolicy with the Kubernetes
// client while the server runs: each change decides the very next requests
// once the manager's cache has seen it, with no restart.
func TestLivePolicies(t *testing.T) {
	const name = "live"
	creds := tokenOf(name)
	ctx := t.Context()
	c := fx.env.Client
	for _, o := range tokenPolicy(name, kobev1.AccessRule{Pools: []string{"ci-small"}}) {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.Delete(context.WithoutCancel(ctx), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", o.GetName(), err)
			}
		})
	}
	whoami := func() int {
		r, err := roundTrip(prepare(t, creds, http.MethodGet, "/v1/whoami", nil))
		if err != nil {
			return 0
		}
		return r.code
	}
	edit := func(rules ...kobev1.AccessRule) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var p kobev1.AccessPolicy
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
				return err
			}
			p.Spec.Rules = rules
			return c.Update(ctx, &p)
		})
		if err != nil {
			t.Fatalf("editing policy %s: %v", name, err)
		}
	}
	refused := func(t *testing.T, pool string, code int, errText, detail string) {
		t.Helper()
		before := leaseObjects(t)
		r := call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: pool})
		requireError(t, r, code, errText, detail)
		requireNoNewLease(t, before)
	}

	eventually(t, "the new policy in the cache", func(context.Context) bool { return whoami() == http.StatusOK })
	createLease(t, creds, "ci-small", "")

	if !t.Run("pool removed from the rule", func(t *testing.T) {
		edit(kobev1.AccessRule{Pools: []string{"dev"}})
		eventually(t, "GET /v1/pools to list only dev", func(context.Context) bool {
			ps, ok := tryDecode[[]wire.Pool](prepare(t, creds, http.MethodGet, "/v1/pools", nil))
			return ok && len(ps) == 1 && ps[0].Name == "dev"
		})
		refused(t, "ci-small", http.StatusForbidden, "pool not allowed", `may not lease from pool "ci-small"`)
		createLease(t, creds, "dev", "")
	}) {
		return
	}
	if !t.Run("no rule matches any more", func(t *testing.T) {
		edit(kobev1.AccessRule{Match: &kobev1.ClaimMatch{Claim: "sub", Value: "someone-else"}, Pools: []string{"*"}})
		eventually(t, "GET /v1/whoami to answer 403", func(context.Context) bool { return whoami() == http.StatusForbidden })
		refused(t, "dev", http.StatusForbidden, "not authorised", "no rule of policy live matches")
	}) {
		return
	}
	t.Run("policy deleted", func(t *testing.T) {
		if err := c.Delete(ctx, &kobev1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "GET /v1/whoami to answer 401", func(context.Context) bool { return whoami() == http.StatusUnauthorized })
		refused(t, "dev", http.StatusUnauthorized, "invalid credentials", "not accepted")
	})
}

// TestStatus shows GET /v1/status: without credentials it answers the
// version and the methods of the existing policies but no pools; with
// credentials it adds the pools the caller may use.
func TestStatus(t *testing.T) {
	t.Run("without credentials", func(t *testing.T) {
		r := call(t, nil, http.MethodGet, "/v1/status", nil)
		st := decode[wire.Status](t, r, http.StatusOK)
		if st.Version != testVersion {
			t.Fatalf("version %q, want %q", st.Version, testVersion)
		}
		want := []string{auth.MethodOIDC, auth.MethodServiceAccount, auth.MethodSSH, auth.MethodToken}
		if !slices.Equal(st.Auth.Methods, want) {
			t.Fatalf("auth methods %v, want %v", st.Auth.Methods, want)
		}
		if st.Auth.Audience != sshAudience {
			t.Fatalf("audience %q, want %q", st.Auth.Audience, sshAudience)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &raw); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw["pools"]; ok {
			t.Fatalf("anonymous status lists pools: %s", r)
		}
	})
	// Policy everything may use every pool of the namespace, including those
	// other tests create.
	var all kobev1.ClusterPoolList
	if err := fx.env.Client.List(t.Context(), &all, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var every []string
	for _, p := range all.Items {
		every = append(every, p.Name)
	}
	slices.Sort(every)
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{"everything", every},
		{"ci-only", []string{"ci-large", "ci-small"}},
	} {
		t.Run("with credentials of "+tc.policy, func(t *testing.T) {
			st := decode[wire.Status](t, call(t, tokenOf(tc.policy), http.MethodGet, "/v1/status", nil), http.StatusOK)
			names := make([]string, len(st.Pools))
			for i := range st.Pools {
				names[i] = st.Pools[i].Name
			}
			if !slices.Equal(names, tc.want) {
				t.Fatalf("pools %v, want %v", names, tc.want)
			}
		})
	}
	t.Run("other routes need credentials", func(t *testing.T) {
		r := call(t, nil, http.MethodGet, "/v1/pools", nil)
		requireError(t, r, http.StatusUnauthorized, "missing credentials", "GET /v1/status")
	})
}
