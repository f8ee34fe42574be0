//go:build integration

package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestOwnership shows that a lease belongs to its requester: to another
// identity it does not exist (404 on GET and PATCH, and DELETE answers 204
// as for a lease that never existed), the lease stays Bound and unchanged,
// and pool listings show the requester only on the caller's own leases.
func TestOwnership(t *testing.T) {
	a, b := tokenOf("owner-a"), tokenOf("owner-b")
	la := createLease(t, a, "ci-small", "")
	lb := createLease(t, b, "ci-small", "")
	objA := leaseObject(t, la.ID)

	for _, tc := range []struct {
		method string
		body   any
	}{
		{http.MethodGet, nil},
		{http.MethodPatch, wire.ExtendLeaseRequest{ExtendTTL: "30m"}},
	} {
		t.Run("B "+tc.method+" A's lease", func(t *testing.T) {
			r := call(t, b, tc.method, "/v1/leases/"+la.ID, tc.body)
			requireReason(t, requireError(t, r, http.StatusNotFound, "lease not found", la.ID), wire.ReasonLeaseNotFound)
			requireBoundUntouched(t, la.ID, objA)
		})
	}
	t.Run("B DELETE A's lease", func(t *testing.T) {
		// The same answer as for a lease that never existed.
		for _, id := range []string{la.ID, "lease-000000000000"} {
			if r := call(t, b, http.MethodDelete, "/v1/leases/"+id, nil); r.code != http.StatusNoContent || len(r.body) != 0 {
				t.Fatalf("DELETE %s as B: %s; want 204 with no body", id, r)
			}
		}
		requireBoundUntouched(t, la.ID, objA)
	})

	t.Run("A reads its lease", func(t *testing.T) {
		got := decode[wire.Lease](t, call(t, a, http.MethodGet, "/v1/leases/"+la.ID, nil), http.StatusOK)
		if got.Phase != wire.PhaseBound || got.Kubeconfig == "" || got.Requester != "owner-a" {
			t.Fatalf("A's own lease: %+v", got)
		}
	})

	t.Run("B lists only its own leases", func(t *testing.T) {
		var ids []string
		eventually(t, "B's lease in GET /v1/leases", func(context.Context) bool {
			ls, ok := tryDecode[[]wire.Lease](prepare(t, b, http.MethodGet, "/v1/leases", nil))
			ids = ids[:0]
			for _, l := range ls {
				ids = append(ids, l.ID)
			}
			return ok && slices.Contains(ids, lb.ID)
		})
		if !slices.Equal(ids, []string{lb.ID}) {
			t.Fatalf("B's leases %v, want just %s", ids, lb.ID)
		}
	})

	for _, caller := range []struct {
		name          string
		creds         apiclient.Credentials
		own, other    string
		ownerIdentity string
	}{
		{"A", a, la.ID, lb.ID, "owner-a"},
		{"B", b, lb.ID, la.ID, "owner-b"},
	} {
		t.Run("pool leases as "+caller.name, func(t *testing.T) {
			var got []wire.Lease
			eventually(t, "both leases in GET /v1/pools/ci-small/leases", func(context.Context) bool {
				var ok bool
				got, ok = tryDecode[[]wire.Lease](prepare(t, caller.creds, http.MethodGet, "/v1/pools/ci-small/leases", nil))
				ids := make([]string, len(got))
				for i := range got {
					ids[i] = got[i].ID
				}
				return ok && slices.Contains(ids, caller.own) && slices.Contains(ids, caller.other)
			})
			for _, l := range got {
				want := ""
				if l.ID == caller.own {
					want = caller.ownerIdentity
				}
				if l.Requester != want {
					t.Errorf("lease %s shows requester %q to %s, want %q", l.ID, l.Requester, caller.name, want)
				}
				if l.Kubeconfig != "" {
					t.Errorf("lease %s shows a kubeconfig in the pool listing", l.ID)
				}
			}
		})
	}
}

// tryDecode sends req and decodes a 200 answer; ok is false for any other
// answer, so that wait-for loops can poll with it.
func tryDecode[T any](req *http.Request) (out T, ok bool) {
	r, err := roundTrip(req)
	if err != nil || r.code != http.StatusOK {
		return out, false
	}
	return out, json.Unmarshal(r.body, &out) == nil
}
