//go:build integration

package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestHeartbeatWritesAtAGrain: a holder that beats often costs the API
// server one status write per grain (a quarter of the timeout), not one
// per beat, and the recorded deadline only moves forward.
func TestHeartbeatWritesAtAGrain(t *testing.T) {
	creds := tokenOf("aliaser")
	l := decode[wire.Lease](t, call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: "ci-small", TTL: "10m", HeartbeatTimeout: "20s"}), http.StatusCreated)
	if l.HeartbeatTimeout != "20s" || l.HeartbeatEndsAt == nil {
		t.Fatalf("created lease: %+v", l)
	}
	// The heartbeat finds the lease through the cache, as GET does.
	eventually(t, "the lease in the cache", func(context.Context) bool {
		return call(t, creds, http.MethodGet, "/v1/leases/"+l.ID, nil).code == http.StatusOK
	})
	obj := leaseObject(t, l.ID)
	if obj.Spec.HeartbeatTimeout == nil || obj.Spec.HeartbeatTimeout.Duration != 20*time.Second {
		t.Fatalf("spec.heartbeatTimeout = %v, want 20s", obj.Spec.HeartbeatTimeout)
	}
	beat := func() wire.Lease {
		return decode[wire.Lease](t, call(t, creds, http.MethodPost, "/v1/leases/"+l.ID+"/heartbeat", nil), http.StatusOK)
	}
	// Within the first grain (5s) of the create: no write at all. The
	// create's own last write (the ledger, the bind) may land after its
	// answer: start counting once the object is still.
	rv := settledVersion(t, l.ID)
	for range 10 {
		beat()
	}
	if got := leaseObject(t, l.ID); got.ResourceVersion != rv || got.Status.HeartbeatDeadline != nil {
		t.Fatalf("10 beats within a grain of the create wrote the lease (resourceVersion %s -> %s, deadline %v)", rv, got.ResourceVersion, got.Status.HeartbeatDeadline)
	}
	// Past a grain: the next beat is written, once; the ones right after it are not.
	time.Sleep(lease.HeartbeatGrain(20*time.Second) + 100*time.Millisecond)
	first := beat()
	if !first.HeartbeatEndsAt.After(*l.HeartbeatEndsAt) {
		t.Fatalf("a beat a grain after the create left heartbeat_ends_at at %s (was %s)", first.HeartbeatEndsAt, l.HeartbeatEndsAt)
	}
	var written *kobev1.ClusterLease
	testenv.Eventually(t, 10*time.Second, "the beat to be recorded", func() error {
		written = leaseObject(t, l.ID)
		if written.Status.HeartbeatDeadline == nil {
			return fmt.Errorf("status.heartbeatDeadline not written")
		}
		return nil
	})
	rv = written.ResourceVersion
	for range 10 {
		if got := beat(); got.HeartbeatEndsAt.Before(*first.HeartbeatEndsAt) {
			t.Fatalf("heartbeat_ends_at moved back: %s < %s", got.HeartbeatEndsAt, first.HeartbeatEndsAt)
		}
	}
	if got := leaseObject(t, l.ID); got.ResourceVersion != rv {
		t.Fatalf("beats within a grain of the last recorded one wrote the lease again (resourceVersion %s -> %s)", rv, got.ResourceVersion)
	}
	if r := call(t, creds, http.MethodDelete, "/v1/leases/"+l.ID, nil); r.code != http.StatusNoContent {
		t.Fatalf("release: %s", r)
	}
	// The very next beat is refused: a beat judges the lease as the API
	// server holds it, so the cache, which may show the release a few ms
	// after DELETE's answer, cannot make an ended lease look alive.
	ended := call(t, creds, http.MethodPost, "/v1/leases/"+l.ID+"/heartbeat", nil)
	requireReason(t, requireError(t, ended, http.StatusGone, "lease has ended", "Released"), wire.ReasonLeaseEnded)
}

// TestHeartbeatDefaultsAndCaps: a pool's heartbeatTimeout applies to
// leases that name none; a rule's maxHeartbeatTimeout clamps longer ones
// and gives one to leases that would have none. A caller cannot get out of
// heartbeats its policy requires by asking for none or for a longer one.
func TestHeartbeatDefaultsAndCaps(t *testing.T) {
	tests := []struct {
		name, identity, pool, requested, want string
	}{
		{"pool default", "everything", heartbeatPool, "", "30s"},
		{"request over the pool default", "everything", heartbeatPool, "5m", "5m"},
		{"no pool default, none asked", "everything", "ci-small", "", ""},
		{"rule cap clamps a longer request", "beater", "ci-small", "10m", "1m"},
		{"rule cap requires heartbeats", "beater", "ci-small", "", "1m"},
		{"rule cap keeps a shorter pool default", "beater", heartbeatPool, "", "30s"},
		{"rule cap keeps a shorter request", "beater", "ci-small", "20s", "20s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			creds := tokenOf(tt.identity)
			l := decode[wire.Lease](t, call(t, creds, http.MethodPost, "/v1/leases", wire.CreateLeaseRequest{Pool: tt.pool, TTL: "10m", HeartbeatTimeout: tt.requested}), http.StatusCreated)
			if l.HeartbeatTimeout != tt.want {
				t.Fatalf("heartbeat_timeout = %q, want %q", l.HeartbeatTimeout, tt.want)
			}
			if (l.HeartbeatEndsAt != nil) != (tt.want != "") {
				t.Fatalf("heartbeat_ends_at = %v with heartbeat_timeout %q", l.HeartbeatEndsAt, tt.want)
			}
			if got := leaseObject(t, l.ID).Spec.HeartbeatTimeout; (got != nil) != (tt.want != "") || got != nil && wire.FormatTTL(got.Duration) != tt.want {
				t.Fatalf("spec.heartbeatTimeout = %v, want %q", got, tt.want)
			}
			if r := call(t, creds, http.MethodDelete, "/v1/leases/"+l.ID, nil); r.code != http.StatusNoContent {
				t.Fatalf("release: %s", r)
			}
		})
	}
}

// settledVersion is lease id's resourceVersion once two reads 300ms apart
// agree.
func settledVersion(t *testing.T, id string) string {
	t.Helper()
	var rv string
	testenv.Eventually(t, 10*time.Second, "lease "+id+" to be still", func() error {
		before := leaseObject(t, id).ResourceVersion
		time.Sleep(300 * time.Millisecond)
		rv = leaseObject(t, id).ResourceVersion
		if rv != before {
			return fmt.Errorf("resourceVersion %s -> %s", before, rv)
		}
		return nil
	})
	return rv
}
