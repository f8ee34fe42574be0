//go:build integration

package apiserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestAlias shows alias end to end: a lease created with one is found by
// it on GET, PATCH and DELETE; a second active lease with the same alias is
// 409; once released the alias can be used again and names the new lease;
// another caller can neither resolve nor release it, and may use the same
// alias for its own lease.
func TestAlias(t *testing.T) {
	creds, other := tokenOf("aliaser"), tokenOf("owner-a")
	const alias = "my-ci.run_1"
	create := func(creds apiclient.Credentials, req wire.CreateLeaseRequest) response {
		return call(t, creds, http.MethodPost, "/v1/leases", req)
	}
	first := decode[wire.Lease](t, create(creds, wire.CreateLeaseRequest{Pool: "ci-small", Alias: alias}), http.StatusCreated)
	if first.Alias != alias || first.Kubeconfig == "" {
		t.Fatalf("created lease: alias %q, kubeconfig %t; want %q and a kubeconfig", first.Alias, first.Kubeconfig != "", alias)
	}
	if got := leaseObject(t, first.ID).Labels[kobev1.LabelAlias]; got != alias {
		t.Fatalf("lease %s has alias label %q, want %q", first.ID, got, alias)
	}

	t.Run("GET and PATCH by alias", func(t *testing.T) {
		got := decode[wire.Lease](t, call(t, creds, http.MethodGet, "/v1/leases/"+alias, nil), http.StatusOK)
		if got.ID != first.ID || got.Alias != alias || got.Kubeconfig == "" {
			t.Fatalf("GET by alias: %+v, want lease %s", got, first.ID)
		}
		ext := decode[wire.ExtendLeaseResponse](t, call(t, creds, http.MethodPatch, "/v1/leases/"+alias, wire.ExtendLeaseRequest{ExtendTTL: "5m"}), http.StatusOK)
		if obj := leaseObject(t, first.ID); obj.Status.Extensions != 1 || ext.Extensions != 1 {
			t.Fatalf("PATCH by alias: answer %+v, lease extensions %d; want 1", ext, obj.Status.Extensions)
		}
	})
	t.Run("duplicate among active leases", func(t *testing.T) {
		before := leaseObjects(t)
		r := create(creds, wire.CreateLeaseRequest{Pool: "ci-large", Alias: alias})
		requireReason(t, requireError(t, r, http.StatusConflict, "alias in use", first.ID), wire.ReasonAliasInUse)
		requireNoNewLease(t, before)
	})
	t.Run("GET /v1/leases filtered by alias and pool", func(t *testing.T) {
		list := func(creds apiclient.Credentials, query string) []string {
			t.Helper()
			var ids []string
			for _, l := range decode[[]wire.Lease](t, call(t, creds, http.MethodGet, "/v1/leases"+query, nil), http.StatusOK) {
				ids = append(ids, l.ID)
			}
			return ids
		}
		for query, want := range map[string][]string{
			"?alias=" + alias:                    {first.ID},
			"?alias=" + alias + "&pool=ci-small": {first.ID},
			"?alias=" + alias + "&pool=ci-large": nil,
			"?alias=other-alias":                 nil,
		} {
			if got := list(creds, query); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("GET /v1/leases%s: %v, want %v", query, got, want)
			}
		}
		if got := list(other, "?alias="+alias); len(got) != 0 {
			t.Errorf("another caller listing by this caller's alias gets %v, want nothing", got)
		}
		for query, says := range map[string]string{
			"?alias=My-CI":           "alias",
			"?pool=Not_A_Name":       "pool",
			"?alais=" + alias:        "unknown query parameter",
			"?alias=a&alias=b":       "given 2 times",
			"?alias=" + alias + "&x": "unknown query parameter",
		} {
			requireReason(t, requireError(t, call(t, creds, http.MethodGet, "/v1/leases"+query, nil), http.StatusBadRequest, "bad request", says), wire.ReasonBadRequest)
		}
	})
	t.Run("another caller", func(t *testing.T) {
		obj := leaseObject(t, first.ID)
		requireReason(t, requireError(t, call(t, other, http.MethodGet, "/v1/leases/"+alias, nil), http.StatusNotFound, "lease not found", alias), wire.ReasonLeaseNotFound)
		requireError(t, call(t, other, http.MethodPatch, "/v1/leases/"+alias, wire.ExtendLeaseRequest{ExtendTTL: "5m"}), http.StatusNotFound, "lease not found", alias)
		if r := call(t, other, http.MethodDelete, "/v1/leases/"+alias, nil); r.code != http.StatusNoContent {
			t.Fatalf("DELETE of another caller's alias: %s; want 204", r)
		}
		requireBoundUntouched(t, first.ID, obj)
		// Aliases are per caller: the other caller may use the same one.
		own := decode[wire.Lease](t, create(other, wire.CreateLeaseRequest{Pool: "ci-small", Alias: alias}), http.StatusCreated)
		if got := decode[wire.Lease](t, call(t, other, http.MethodGet, "/v1/leases/"+alias, nil), http.StatusOK); got.ID != own.ID {
			t.Fatalf("the other caller's alias resolves to %s, want its own %s", got.ID, own.ID)
		}
		if r := call(t, other, http.MethodDelete, "/v1/leases/"+own.ID, nil); r.code != http.StatusNoContent {
			t.Fatalf("releasing %s: %s", own.ID, r)
		}
	})
	t.Run("reuse after release", func(t *testing.T) {
		if r := call(t, creds, http.MethodDelete, "/v1/leases/"+alias, nil); r.code != http.StatusNoContent {
			t.Fatalf("DELETE by alias: %s", r)
		}
		if obj := leaseObject(t, first.ID); obj.Status.Phase != kobev1.LeaseReleased {
			t.Fatalf("lease %s is %s after DELETE by alias, want Released", first.ID, obj.Status.Phase)
		}
		// Released, the alias still names it (the most recent lease).
		if got := decode[wire.Lease](t, call(t, creds, http.MethodGet, "/v1/leases/"+alias, nil), http.StatusOK); got.ID != first.ID || got.Phase != wire.PhaseReleased {
			t.Fatalf("GET by alias after release: %s %s, want %s Released", got.ID, got.Phase, first.ID)
		}
		second := decode[wire.Lease](t, create(creds, wire.CreateLeaseRequest{Profile: "ci-small", Alias: alias}), http.StatusCreated)
		if second.ID == first.ID || second.Alias != alias {
			t.Fatalf("second lease %+v", second)
		}
		testenv.Eventually(t, 15*time.Second, "the alias to name the new lease", func() error {
			got, ok := tryDecode[wire.Lease](prepare(t, creds, http.MethodGet, "/v1/leases/"+alias, nil))
			if !ok || got.ID != second.ID || got.Phase != wire.PhaseBound {
				return fmt.Errorf("GET by alias answers %s %s (ok %t)", got.ID, got.Phase, ok)
			}
			return nil
		})
	})
	t.Run("bad aliases", func(t *testing.T) {
		before := leaseObjects(t)
		for _, bad := range []string{"My-CI", "-ci", "ci-", "with space", "lease-0123456789ab", strings.Repeat("a", 64), "ci/1"} {
			r := create(creds, wire.CreateLeaseRequest{Pool: "ci-small", Alias: bad})
			requireReason(t, requireError(t, r, http.StatusBadRequest, "bad request", "alias"), wire.ReasonBadRequest)
		}
		requireNoNewLease(t, before)
	})
}

// TestLeaseRefs shows that a path that is neither a lease id nor an alias
// is 400 on GET, PATCH and DELETE, and what a well-formed reference that
// names no lease of the caller answers.
func TestLeaseRefs(t *testing.T) {
	creds := tokenOf("aliaser")
	for _, ref := range []string{"NOT_AN_ID", "lease-ABCDEF012345", "-x", "a%20b"} {
		for _, m := range []struct {
			method string
			body   any
		}{{http.MethodGet, nil}, {http.MethodPatch, wire.ExtendLeaseRequest{ExtendTTL: "5m"}}, {http.MethodDelete, nil}} {
			r := call(t, creds, m.method, "/v1/leases/"+ref, m.body)
			requireReason(t, requireError(t, r, http.StatusBadRequest, "bad request", "neither a lease id"), wire.ReasonBadRequest)
		}
	}
	for _, ref := range []string{"lease-0123456789ab", "never-used-alias"} {
		requireReason(t, requireError(t, call(t, creds, http.MethodGet, "/v1/leases/"+ref, nil), http.StatusNotFound, "lease not found", ref), wire.ReasonLeaseNotFound)
		requireError(t, call(t, creds, http.MethodPatch, "/v1/leases/"+ref, wire.ExtendLeaseRequest{ExtendTTL: "5m"}), http.StatusNotFound, "lease not found", ref)
		if r := call(t, creds, http.MethodDelete, "/v1/leases/"+ref, nil); r.code != http.StatusNoContent {
			t.Fatalf("DELETE %s: %s; want 204", ref, r)
		}
	}
}

// TestRequestFields shows that unknown request fields are refused, naming
// the field, while alias and profile are accepted.
func TestRequestFields(t *testing.T) {
	creds := tokenOf("aliaser")
	before := leaseObjects(t)
	for _, body := range []string{`{"pool":"ci-small","colour":"red"}`, `{"pool":"ci-small","tll":"10m"}`} {
		field := strings.Split(strings.Split(body, `,"`)[1], `"`)[0]
		r := call(t, creds, http.MethodPost, "/v1/leases", []byte(body))
		requireReason(t, requireError(t, r, http.StatusBadRequest, "bad request", field), wire.ReasonBadRequest)
	}
	r := call(t, creds, http.MethodPatch, "/v1/leases/lease-0123456789ab", []byte(`{"extend_ttl":"5m","force":true}`))
	requireError(t, r, http.StatusBadRequest, "bad request", "force")
	requireNoNewLease(t, before)

	l := decode[wire.Lease](t, call(t, creds, http.MethodPost, "/v1/leases", []byte(`{"profile":"ci-small","alias":"fields","ttl":"10m"}`)), http.StatusCreated)
	if l.Pool != "ci-small" || l.Alias != "fields" {
		t.Fatalf("lease by profile with alias: %+v", l)
	}
	if r := call(t, creds, http.MethodDelete, "/v1/leases/fields", nil); r.code != http.StatusNoContent {
		t.Fatalf("releasing by alias: %s", r)
	}
}

// TestReleaseGone shows DELETE's semantics for the owner: 204 for an
// active lease (which ends), again 204 once ended, and 204 once the object
// is gone altogether (after retention), while GET then says 404.
func TestReleaseGone(t *testing.T) {
	creds := tokenOf("aliaser")
	l := createLease(t, creds, "ci-large", "10m")
	path := "/v1/leases/" + l.ID
	for range 2 {
		if r := call(t, creds, http.MethodDelete, path, nil); r.code != http.StatusNoContent {
			t.Fatalf("DELETE %s: %s", path, r)
		}
	}
	obj := leaseObject(t, l.ID)
	if obj.Status.Phase != kobev1.LeaseReleased || obj.Status.EndedAt == nil {
		t.Fatalf("lease %s is %s after DELETE, want Released", l.ID, obj.Status.Phase)
	}
	if err := fx.env.Client.Delete(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the lease object to be gone", func() error {
		err := fx.env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		if client.IgnoreNotFound(err) != nil || err == nil {
			return fmt.Errorf("lease %s still readable (err %w)", l.ID, err)
		}
		return nil
	})
	if r := call(t, creds, http.MethodDelete, path, nil); r.code != http.StatusNoContent {
		t.Fatalf("DELETE of a deleted lease: %s; want 204", r)
	}
	testenv.Eventually(t, 15*time.Second, "GET to say 404", func() error {
		if r := call(t, creds, http.MethodGet, path, nil); r.code != http.StatusNotFound {
			return fmt.Errorf("GET %s: %s", path, r)
		}
		return nil
	})
}

// TestQueuePositions queues three leases in a pool without members: each
// answer shows its live place in the queue, on POST, GET, the caller's
// list and the pool's list, and the places move up when the first leaves.
func TestQueuePositions(t *testing.T) {
	creds := tokenOf("queuer")
	var ids []string
	for i := range 3 {
		l := decode[wire.Lease](t, call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: queuePool, TTL: "10m"}), http.StatusAccepted)
		if l.Phase != wire.PhasePending || l.QueuePosition != i+1 || l.Kubeconfig != "" {
			t.Fatalf("lease %d: phase %s, queue_position %d; want Pending at %d", i, l.Phase, l.QueuePosition, i+1)
		}
		ids = append(ids, l.ID)
	}
	positions := func(want map[string]int) func() error {
		return func() error {
			for id, pos := range want {
				got, ok := tryDecode[wire.Lease](prepare(t, creds, http.MethodGet, "/v1/leases/"+id, nil))
				if !ok || got.QueuePosition != pos {
					return fmt.Errorf("GET %s: queue_position %d, want %d", id, got.QueuePosition, pos)
				}
			}
			for _, path := range []string{"/v1/leases", "/v1/pools/" + queuePool + "/leases"} {
				ls, ok := tryDecode[[]wire.Lease](prepare(t, creds, http.MethodGet, path, nil))
				if !ok || len(ls) != len(want) {
					return fmt.Errorf("GET %s: %d leases, want %d", path, len(ls), len(want))
				}
				for _, l := range ls {
					if l.Phase != wire.PhasePending || l.QueuePosition != want[l.ID] {
						return fmt.Errorf("GET %s: %s is %s at %d, want Pending at %d", path, l.ID, l.Phase, l.QueuePosition, want[l.ID])
					}
				}
			}
			return nil
		}
	}
	testenv.Eventually(t, 15*time.Second, "positions 1, 2, 3", positions(map[string]int{ids[0]: 1, ids[1]: 2, ids[2]: 3}))

	if r := call(t, creds, http.MethodDelete, "/v1/leases/"+ids[0], nil); r.code != http.StatusNoContent {
		t.Fatalf("releasing %s: %s", ids[0], r)
	}
	testenv.Eventually(t, 15*time.Second, "positions 1, 2 after the first left", positions(map[string]int{ids[1]: 1, ids[2]: 2}))
	got := decode[wire.Lease](t, call(t, creds, http.MethodGet, "/v1/leases/"+ids[0], nil), http.StatusOK)
	if got.Phase != wire.PhaseReleased || got.QueuePosition != 0 {
		t.Fatalf("released lease: %s at %d, want Released at 0", got.Phase, got.QueuePosition)
	}
	for _, id := range ids[1:] {
		call(t, creds, http.MethodDelete, "/v1/leases/"+id, nil)
	}
}
