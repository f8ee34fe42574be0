package apiclienttest_test

import (
	"testing"

	"github.com/kunobi-ninja/kobe/internal/apiclient"
	"github.com/kunobi-ninja/kobe/internal/apiclient/apiclienttest"
	"github.com/kunobi-ninja/kobe/internal/contract"
	"github.com/kunobi-ninja/kobe/internal/wire"
)

// TestContract runs the contract table against the fake, as
// internal/apiserver's TestContract runs it against the real server.
func TestContract(t *testing.T) {
	pool := func(name string, ready int) wire.Pool {
		return wire.Pool{Name: name, Phase: "Healthy", Ready: ready, Policy: wire.PoolPolicy{Mode: "fixed", TTL: "1h", WarmTarget: ready}}
	}
	suitePools := []string{"contract-*"}
	srv := apiclienttest.New(t,
		apiclienttest.WithPool(pool("contract-ready", 20)),
		apiclienttest.WithPool(pool("contract-empty", 0)),
		apiclienttest.WithUnavailablePool(pool("contract-deleting", 1), wire.ReasonPoolBeingDeleted),
		apiclienttest.WithUnavailablePool(pool("contract-unavailable", 0), wire.ReasonBackendUnavailable),
		apiclienttest.WithUnavailablePool(pool("contract-quarantined", 0), wire.ReasonPoolQuarantined),
		apiclienttest.WithIdentity("allowed-token", apiclienttest.Identity{Name: "allowed", Pools: suitePools}),
		apiclienttest.WithIdentity("other-token", apiclienttest.Identity{Name: "other", Pools: suitePools}),
		apiclienttest.WithIdentity("limited-token", apiclienttest.Identity{Name: "limited", Pools: suitePools, MaxConcurrentLeases: 1}),
		apiclienttest.WithIdentity("denied-token", apiclienttest.Identity{Name: "denied", Pools: []string{"elsewhere-*"}}),
	)
	contract.Run(t, contract.Target{
		URL:             srv.URL,
		Allowed:         apiclient.BearerToken("allowed-token"),
		Other:           apiclient.BearerToken("other-token"),
		Limited:         apiclient.BearerToken("limited-token"),
		Denied:          apiclient.BearerToken("denied-token"),
		Invalid:         apiclient.BearerToken("wrong-token"),
		ReadyPool:       "contract-ready",
		EmptyPool:       "contract-empty",
		DeletingPool:    "contract-deleting",
		UnavailablePool: "contract-unavailable",
		QuarantinedPool: "contract-quarantined",
		MissingPool:     "contract-missing",
		MaxExtensions:   srv.MaxExtensions,
		MaxBodyBytes:    apiclienttest.MaxBodyBytes,
	})
}
