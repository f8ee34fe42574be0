package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultJanitorInterval is how often the janitor looks for expired nonce
// objects: every SSH window. A nonce lives two windows past its signature
// (sshsig.NonceExpiry: a replica whose clock lags the janitor's by up to a
// window must still find it), so about three windows' worth of objects
// exist at once.
const DefaultJanitorInterval = 30 * time.Second

// listPage bounds one list call.
const listPage = 500

// Janitor deletes the nonce objects of Namespace whose expiry has passed
// on its Clock. It is a manager.Runnable that runs on the leader only:
// deleting is idempotent, one replica is enough. The expiry written by the
// store already covers replicas whose clocks lag the leader's (the
// verifier's skew), so the janitor adds nothing to it.
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
func (j *Janitor) Start(ctx context.Context) error {
	interval := j.Interval
	if interval <= 0 {
		interval = DefaultJanitorInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := j.Sweep(ctx); err != nil {
			j.Log.Error(err, "Sweeping expired nonce objects failed; retrying", "namespace", j.Namespace, "deleted", n)
		} else if n > 0 {
			j.Log.V(1).Info("Deleted expired nonce objects", "namespace", j.Namespace, "deleted", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep deletes the expired nonce objects once and says how many it deleted.
func (j *Janitor) Sweep(ctx context.Context) (int, error) {
	clk := j.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	now := clk.Now()
	deleted := 0
	opts := []client.ListOption{client.InNamespace(j.Namespace), client.MatchingLabels{Label: KindSSHNonce}, client.Limit(listPage)}
	for {
		var list coordinationv1.LeaseList
		if err := j.Reader.List(ctx, &list, opts...); err != nil {
			return deleted, fmt.Errorf("listing nonce objects: %w", err)
		}
		for i := range list.Items {
			l := &list.Items[i]
			exp, ok := Expiry(l)
			if ok && !now.After(exp) {
				continue
			}
			// The UID precondition leaves alone an object re-created under
			// the same name since the list.
			err := j.Client.Delete(ctx, l, client.Preconditions{UID: &l.UID})
			switch {
			case err == nil:
				deleted++
			case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			default:
				return deleted, fmt.Errorf("deleting nonce object %s: %w", l.Name, err)
			}
		}
		if list.Continue == "" {
			return deleted, nil
		}
		opts = append(opts[:3], client.Continue(list.Continue))
	}
}
