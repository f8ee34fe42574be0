//go:build integration

package apiserver_test

import (
	"net/http"
	"testing"

	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestCleanupModeUnsupported: a cleanupMode the pool's backend cannot prove
// is refused with 422 and its reason before any lease is written (this
// server's binder knows no verifiable backend), never downgraded.
func TestCleanupModeUnsupported(t *testing.T) {
	before := leaseObjects(t)
	r := call(t, tokenOf("everything"), http.MethodPost, "/v1/leases",
		wire.CreateLeaseRequest{Pool: "ci-small", TTL: "10m", CleanupMode: "VerifiedDestroy"})
	e := requireError(t, r, http.StatusUnprocessableEntity, "cleanupMode VerifiedDestroy is not supported by the pool's backend",
		"no backend wired in this operator can prove a member destroyed; use cleanupMode Standard")
	requireReason(t, e, wire.ReasonCleanupModeUnsupported)
	if got := r.header.Get("Retry-After"); got != "" {
		t.Fatalf("Retry-After %q on a refusal retrying cannot fix", got)
	}
	requireNoNewLease(t, before)
}
