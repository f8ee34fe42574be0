package replay

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kunobi-ninja/kobe/internal/retention"
)

// DefaultJanitorInterval is how often the janitor looks for expired nonce
// objects: every SSH window. A nonce lives two windows past its signature
// (sshsig.NonceExpiry: a replica whose clock lags the janitor's by up to a
// window must still find it), so about three windows' worth of objects
// exist at once.
const DefaultJanitorInterval = 30 * time.Second

// Janitor deletes the nonce objects of Namespace whose expiry has passed
// on its Clock (retention.Janitor). It is a manager.Runnable that runs on
// the leader only: deleting is idempotent, one replica is enough. The
// expiry written by the store already covers replicas whose clocks lag the
// leader's (the verifier's skew), so the janitor adds nothing to it.
type Janitor struct {
	// Client deletes; Reader lists (the API reader: nonce objects are not
	// worth an informer cache).
	Client    client.Client
	Reader    client.Reader
	Namespace string
	// Interval between sweeps (DefaultJanitorInterval).
	Interval time.Duration
	Clock    clock.PassiveClock
	Log      logr.Logger
}

// NeedLeaderElection is true: one replica sweeps.
func (j *Janitor) NeedLeaderElection() bool { return true }

// Start sweeps at once and then every Interval until ctx ends.
func (j *Janitor) Start(ctx context.Context) error { return j.janitor().Start(ctx) }

// Sweep deletes the expired nonce objects once and says how many it deleted.
func (j *Janitor) Sweep(ctx context.Context) (int, error) { return j.janitor().Sweep(ctx) }

// janitor judges nonce objects: a nonce is refused through its expiry
// (sshsig.NonceStore), so it goes only after; an object whose expiry cannot
// be read goes at once (it was edited, and records nothing reliable). The
// many deletions are logged at V(1).
func (j *Janitor) janitor() *retention.Janitor {
	interval := j.Interval
	if interval <= 0 {
		interval = DefaultJanitorInterval
	}
	return &retention.Janitor{
		Kind: "nonce object", Client: j.Client, Reader: j.Reader, Namespace: j.Namespace,
		Labels:   client.MatchingLabels{Label: KindSSHNonce},
		NewList:  func() client.ObjectList { return &coordinationv1.LeaseList{} },
		Deadline: leaseExpiry,
		Rule:     retention.Rule{DeleteUnreadable: true, LiveAtDeadline: true},
		Interval: interval, Clock: j.Clock, Log: j.Log, Verbosity: 1,
	}
}

func leaseExpiry(o client.Object) (time.Time, bool) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return time.Time{}, false
	}
	return Expiry(l)
}
