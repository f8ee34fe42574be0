// Package retention deletes records whose time is up, for every kind of
// record kobe keeps past its use (lease audit records, cleanup receipts,
// SSH nonce objects): Rule.Due is the pure decision of whether one record
// goes, and Janitor the one leader-only loop that lists a kind of record by
// label, asks the decision and deletes what is due. It knows no record's
// format (each owner says how to read a record's deadline) and must not
// import a controller.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// listPage bounds one list call; a sweep pages through the rest.
const listPage = 500

// Rule says how one kind of record is judged.
type Rule struct {
	// DeleteUnreadable deletes a record whose deadline cannot be read (it
	// is no longer one of ours) instead of keeping it (deleting a proof is
	// the one mistake that cannot be undone).
	DeleteUnreadable bool
	// LiveAtDeadline keeps a record at its deadline itself and deletes it
	// only once now is past it: a record that still counts at that instant
	// (a nonce is refused through its expiry).
	LiveAtDeadline bool
}

// Due reports whether a record whose deadline is deadline (ok false: it has
// none that can be read) is to be deleted at now.
func (r Rule) Due(deadline time.Time, ok bool, now time.Time) bool {
	switch {
	case !ok:
		return r.DeleteUnreadable
	case r.LiveAtDeadline:
		return now.After(deadline)
	default:
		return !now.Before(deadline)
	}
}

// Janitor is a manager.Runnable, on the leader only (deleting is
// idempotent, one replica is enough), that deletes the records of one kind
// in Namespace whose time is up, at start and then every Interval. It lists
// them live by label: records are not worth an informer cache.
type Janitor struct {
	// Kind names one record in logs and errors ("audit record"; an s is
	// added for several).
	Kind string
	// Client deletes; Reader lists (the manager's API reader).
	Client    client.Client
	Reader    client.Reader
	Namespace string
	// Labels select the records; nothing without them is ever deleted.
	Labels client.MatchingLabels
	// NewList returns an empty list of the records' type.
	NewList func() client.ObjectList
	// Deadline reads when obj may be deleted; false when obj carries no
	// deadline that can be read (Rule says what becomes of it).
	Deadline func(obj client.Object) (time.Time, bool)
	Rule     Rule
	// Interval between sweeps.
	Interval time.Duration
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// Log gets one line per sweep that deleted something, at V(Verbosity),
	// and one per failed sweep.
	Log       logr.Logger
	Verbosity int
}

// NeedLeaderElection is true: one replica deletes.
func (j *Janitor) NeedLeaderElection() bool { return true }

// Start sweeps at once and then every Interval until ctx ends; a failed
// sweep is logged and tried again at the next interval.
func (j *Janitor) Start(ctx context.Context) error {
	if j.Interval <= 0 {
		return fmt.Errorf("deleting expired %ss: interval %s is not positive", j.Kind, j.Interval)
	}
	tick := time.NewTicker(j.Interval)
	defer tick.Stop()
	for {
		if n, err := j.Sweep(ctx); err != nil {
			j.Log.Error(err, "Deleting expired records failed; retrying", "kind", j.Kind, "namespace", j.Namespace, "deleted", n)
		} else if n > 0 {
			j.Log.V(j.Verbosity).Info("Deleted expired records", "kind", j.Kind, "namespace", j.Namespace, "deleted", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Sweep deletes the records due now once and says how many it deleted.
// Each delete is fenced on the UID and resourceVersion that were judged: a
// record re-created or rewritten since the list (a receipt gets a later
// deadline with each teardown attempt) is judged again at the next sweep.
func (j *Janitor) Sweep(ctx context.Context) (int, error) {
	if j.NewList == nil || j.Deadline == nil || len(j.Labels) == 0 {
		return 0, errors.New("retention janitor: NewList, Deadline and Labels are required")
	}
	clk := j.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	now := clk.Now()
	deleted := 0
	opts := []client.ListOption{client.InNamespace(j.Namespace), j.Labels, client.Limit(listPage)}
	for {
		list := j.NewList()
		if err := j.Reader.List(ctx, list, opts...); err != nil {
			return deleted, fmt.Errorf("listing %ss: %w", j.Kind, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return deleted, fmt.Errorf("listing %ss: %w", j.Kind, err)
		}
		for _, item := range items {
			obj, ok := item.(client.Object)
			if !ok {
				return deleted, fmt.Errorf("listing %ss: %T is not an object", j.Kind, item)
			}
			if deadline, ok := j.Deadline(obj); !j.Rule.Due(deadline, ok, now) {
				continue
			}
			uid, rv := obj.GetUID(), obj.GetResourceVersion()
			err := j.Client.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
			switch {
			case err == nil:
				deleted++
			case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			default:
				return deleted, fmt.Errorf("deleting %s %s: %w", j.Kind, obj.GetName(), err)
			}
		}
		next := list.GetContinue()
		if next == "" {
			return deleted, nil
		}
		opts = []client.ListOption{client.InNamespace(j.Namespace), j.Labels, client.Limit(listPage), client.Continue(next)}
	}
}
