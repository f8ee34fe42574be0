package leaseservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultLedgerSweepInterval is how often LedgerJanitor looks for ledgers
// to delete.
const DefaultLedgerSweepInterval = 5 * time.Minute

// LedgerJanitor deletes the lease ledgers (ledger.go) that have nothing left
// to count and whose owner holds no active lease. It is a manager.Runnable
// that runs on the leader only; a delete is fenced by the resourceVersion it
// judged, so a ledger written meanwhile by a replica admitting a lease stays.
type LedgerJanitor struct {
	svc      *Service
	interval time.Duration
}

// NewLedgerJanitor returns a janitor of the ledgers of the service built from
// opts, sweeping every interval (0: DefaultLedgerSweepInterval).
func NewLedgerJanitor(opts Options, interval time.Duration) *LedgerJanitor {
	if interval <= 0 {
		interval = DefaultLedgerSweepInterval
	}
	return &LedgerJanitor{svc: New(opts), interval: interval}
}

// NeedLeaderElection: one replica sweeps.
func (j *LedgerJanitor) NeedLeaderElection() bool { return true }

// Start sweeps every interval until ctx ends. A failed sweep is logged and
// tried again at the next tick.
func (j *LedgerJanitor) Start(ctx context.Context) error {
	t := time.NewTicker(j.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := j.Sweep(ctx); err != nil && ctx.Err() == nil {
				j.svc.opts.Log.Error(err, "Sweeping lease ledgers failed; trying again later")
			}
		}
	}
}

// Sweep deletes the idle ledgers once and returns how many it deleted.
func (j *LedgerJanitor) Sweep(ctx context.Context) (int, error) {
	s := j.svc
	var cms corev1.ConfigMapList
	if err := s.opts.APIReader.List(ctx, &cms, client.InNamespace(s.opts.Namespace), client.HasLabels{LabelLedger}); err != nil {
		return 0, fmt.Errorf("listing lease ledgers: %w", err)
	}
	deleted := 0
	var errs []error
	for i := range cms.Items {
		cm := &cms.Items[i]
		idle, err := j.idle(ctx, cm)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !idle {
			continue
		}
		err = s.opts.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			// Written or deleted meanwhile: judged again next time.
		default:
			errs = append(errs, fmt.Errorf("deleting lease ledger %s: %w", cm.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

// idle reports whether cm has no entry that still counts and its owner no
// active lease.
func (j *LedgerJanitor) idle(ctx context.Context, cm *corev1.ConfigMap) (bool, error) {
	o := ledgerOwner{policy: cm.Annotations[annotationLedgerPolicy], identity: cm.Annotations[annotationLedgerIdentity]}
	if LedgerName(o.hash()) != cm.Name {
		// Not a ledger this service wrote: leave it alone.
		return false, nil
	}
	entries := map[string]ledgerEntry{}
	for name, raw := range cm.Data {
		var e ledgerEntry
		if err := json.Unmarshal([]byte(raw), &e); err == nil {
			entries[name] = e
		}
	}
	leases, err := j.svc.ownedLeases(ctx, o)
	if err == nil {
		err = j.svc.addYoungEntryLeases(ctx, o, ledger{entries: entries}, &leases)
	}
	if err != nil {
		return false, err
	}
	t := count(entries, leases, "", j.svc.opts.Clock.Now())
	return t.held == 0 && len(t.keep) == 0, nil
}
