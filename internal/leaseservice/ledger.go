package leaseservice

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auth"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

// The ledger makes a caller's limits exact on every replica. It is one
// ConfigMap per owner (policy and identity) in the service's namespace,
// named from RequesterHash, holding an entry per lease of that owner that
// is being admitted or waits in a queue. Every change to it is an update
// fenced by resourceVersion, so two replicas admitting leases of one owner
// at once are serialised by the API server: one writes, the other
// conflicts, reads again and counts the first one's entry.
//
// A request that needs a limit or an alias checked (admit):
//  1. reads the ledger, then lists the owner's leases, both live;
//  2. counts what the owner holds: its active leases, plus the entries of
//     leases not created yet (not listed) and younger than ReservationGrace;
//     refuses when that reaches the limit, or when an active lease or such
//     an entry has the alias;
//  3. writes its own entry (the lease's name is chosen beforehand), pruning
//     entries that no longer count; a conflict starts again at 1;
//  4. only then creates the lease, within reservationCreateBudget, and
//     drops its entry if the create fails.
//
// A lease that cannot be bound at once by a caller whose rule sets no
// maxConcurrentLeases takes a queue slot the same way (takeQueueSlot): an
// entry marked queued, counted while its lease is queued; at
// Options.MaxQueuedPerOwner slots the lease is withdrawn and refused.
//
// An entry of a replica that died between steps 3 and 4 blocks nothing
// beyond ReservationGrace. Ledgers with nothing left to count and no
// active lease of their owner are deleted by LedgerJanitor.

const (
	// LabelLedger marks the ConfigMaps that are lease ledgers.
	LabelLedger = "kobe.kunobi.ninja/lease-ledger"
	// annotationLedgerPolicy and annotationLedgerIdentity record the owner
	// of a ledger, checked on every read: its name is only a hash.
	annotationLedgerPolicy   = "kobe.kunobi.ninja/requester-policy"
	annotationLedgerIdentity = "kobe.kunobi.ninja/requester-identity"

	// ReservationGrace is how long an entry of a lease that is not created
	// yet counts. It must exceed reservationCreateBudget by more than the
	// clock skew between replicas.
	ReservationGrace = 30 * time.Second
	// reservationCreateBudget bounds a lease's create after its entry is
	// written.
	reservationCreateBudget = 10 * time.Second

	// DefaultMaxQueuedPerOwner is Options.MaxQueuedPerOwner's default.
	DefaultMaxQueuedPerOwner = 10
)

// ledgerBackoff spaces the retries of a ledger write that lost a race to
// another replica; one owner has at most one writer per replica at a time.
var ledgerBackoff = wait.Backoff{Steps: 12, Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 1, Cap: 500 * time.Millisecond}

// ledgerEntry is what the ledger records of one lease, keyed by its name.
type ledgerEntry struct {
	// At is when the entry was written, by the writer's clock.
	At time.Time `json:"at"`
	// Alias is the lease's alias, if any.
	Alias string `json:"alias,omitempty"`
	// Queued: the lease holds one of the owner's queue slots.
	Queued bool `json:"queued,omitempty"`
}

// LedgerName is the name of the ledger of the owner with RequesterHash hash.
func LedgerName(hash string) string { return "kobe-lease-ledger-" + hash }

// ledgerOwner is who a ledger belongs to.
type ledgerOwner struct{ policy, identity string }

func ownerOf(p *auth.Principal) ledgerOwner {
	return ledgerOwner{policy: p.Policy, identity: p.Identity}
}

func (o ledgerOwner) owns(l *kobev1.ClusterLease) bool {
	return l.Spec.Requester.Policy == o.policy && l.Spec.Requester.Identity == o.identity
}

func (o ledgerOwner) hash() string {
	return RequesterHash(&auth.Principal{Policy: o.policy, Identity: o.identity})
}

// ledger is one owner's ledger as read, with its entries decoded.
type ledger struct {
	cm      *corev1.ConfigMap // nil: none yet
	entries map[string]ledgerEntry
}

// tally is what an owner holds, counted from its ledger and its leases.
type tally struct {
	// held: active leases plus entries of leases not created yet.
	held int32
	// queued: entries holding a queue slot whose lease is still queued, or
	// not listed yet.
	queued int32
	// aliasHolder is the lease that holds the alias asked about, if any.
	aliasHolder string
	// keep are the entries that still count; the others are pruned.
	keep map[string]ledgerEntry
}

// count tallies the owner's entries against its leases (listed after the
// ledger was read) at now. A lease that is listed counts by itself (when
// active), so its entry only still matters while it holds a queue slot.
func count(entries map[string]ledgerEntry, leases []kobev1.ClusterLease, alias string, now time.Time) tally {
	t := tally{keep: map[string]ledgerEntry{}}
	listed := make(map[string]*kobev1.ClusterLease, len(leases))
	for i := range leases {
		l := &leases[i]
		listed[l.Name] = l
		if !lease.IsActive(l) {
			continue
		}
		t.held++
		if alias != "" && l.Labels[kobev1.LabelAlias] == alias {
			t.aliasHolder = l.Name
		}
	}
	for name, e := range entries {
		l, ok := listed[name]
		switch {
		case !ok && now.Sub(e.At) < ReservationGrace:
			t.held++
			if e.Queued {
				t.queued++
			}
			if alias != "" && e.Alias == alias {
				t.aliasHolder = name
			}
			t.keep[name] = e
		case ok && e.Queued && lease.IsActive(l) && lease.IsQueued(l):
			t.queued++
			t.keep[name] = e
		}
	}
	return t
}

// readLedger reads the owner's ledger and then its leases, both live: in
// this order, every lease whose entry the ledger holds was created before
// the listing, unless its entry is a reservation still in flight. The
// listing holds the owner's active leases only (lease.NotEnded: an owner
// keeps its ended leases for --lease-retention, hundreds for a busy CI
// identity, and every admission under a limit read them all), so a young
// entry whose lease it lacks is read on its own: that lease may have been
// created and ended already, and must then not count as in flight.
func (s *Service) readLedger(ctx context.Context, o ledgerOwner) (ledger, []kobev1.ClusterLease, error) {
	led, err := s.readLedgerOnly(ctx, o)
	if err != nil {
		return led, nil, err
	}
	leases, err := s.ownedLeases(ctx, o)
	if err != nil {
		return led, nil, err
	}
	return led, leases, s.addYoungEntryLeases(ctx, o, led, &leases)
}

// addYoungEntryLeases appends to leases, read live, the lease of each
// entry younger than ReservationGrace that leases lacks (count decides
// from it whether the entry still counts). Older entries count only with a
// lease that is listed, so they need no read.
func (s *Service) addYoungEntryLeases(ctx context.Context, o ledgerOwner, led ledger, leases *[]kobev1.ClusterLease) error {
	listed := make(map[string]bool, len(*leases))
	for i := range *leases {
		listed[(*leases)[i].Name] = true
	}
	now := s.opts.Clock.Now()
	for name, e := range led.entries {
		if listed[name] || now.Sub(e.At) >= ReservationGrace {
			continue
		}
		l := kobev1.ClusterLease{}
		err := s.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: name}, &l)
		switch {
		case apierrors.IsNotFound(err):
			// Not created yet: the reservation is in flight.
		case err != nil:
			return fmt.Errorf("reading lease %s of %s: %w", name, o.identity, err)
		case o.owns(&l):
			*leases = append(*leases, l)
		}
	}
	return nil
}

// readLedgerOnly reads the owner's ledger, live.
func (s *Service) readLedgerOnly(ctx context.Context, o ledgerOwner) (ledger, error) {
	led := ledger{entries: map[string]ledgerEntry{}}
	cm := &corev1.ConfigMap{}
	err := s.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: LedgerName(o.hash())}, cm)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return led, fmt.Errorf("reading the lease ledger of %s: %w", o.identity, err)
	default:
		if cm.Annotations[annotationLedgerPolicy] != o.policy || cm.Annotations[annotationLedgerIdentity] != o.identity {
			return led, fmt.Errorf("lease ledger %s belongs to another owner than %s/%s", cm.Name, o.policy, o.identity)
		}
		led.cm = cm
		for name, raw := range cm.Data {
			var e ledgerEntry
			if err := json.Unmarshal([]byte(raw), &e); err != nil {
				continue // not an entry of ours: the next write drops it
			}
			led.entries[name] = e
		}
	}
	return led, nil
}

// entryLeases are the leases of the ledger's entries, for a change that
// counts only entries (queue slots, an entry's removal), not everything
// the owner holds: an owner keeps its ended leases for --lease-retention,
// and listing them all live on every queued request cost the host API
// server more than the request. Each entry's lease comes from the cache,
// which can only be behind: it may show a lease still queued that is
// bound already, never the reverse, so a queue slot is at worst counted
// a moment too long. A lease the cache does not show although its entry
// is older than ReservationGrace (so it was created, or never will be) is
// read live.
func (s *Service) entryLeases(ctx context.Context, o ledgerOwner, led ledger) ([]kobev1.ClusterLease, error) {
	now := s.opts.Clock.Now()
	var out []kobev1.ClusterLease
	for name, e := range led.entries {
		key := client.ObjectKey{Namespace: s.opts.Namespace, Name: name}
		l := kobev1.ClusterLease{}
		err := s.opts.Reader.Get(ctx, key, &l)
		if apierrors.IsNotFound(err) && now.Sub(e.At) >= ReservationGrace {
			err = s.opts.APIReader.Get(ctx, key, &l)
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading lease %s of %s: %w", name, o.identity, err)
		case o.owns(&l):
			out = append(out, l)
		}
	}
	return out, nil
}

// ownedLeases lists the owner's leases that have not ended, live, filtered
// by the API server. Against a ClusterLease CRD from before .status.phase
// was a selectable field (the server refuses the selector), it lists them
// all; count skips the ended ones either way.
func (s *Service) ownedLeases(ctx context.Context, o ledgerOwner) ([]kobev1.ClusterLease, error) {
	var ls kobev1.ClusterLeaseList
	owner := client.MatchingLabels{kobev1.LabelRequesterHash: o.hash()}
	err := s.opts.APIReader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), owner, client.MatchingFieldsSelector{Selector: lease.NotEnded()})
	if apierrors.IsBadRequest(err) {
		err = s.opts.APIReader.List(ctx, &ls, client.InNamespace(s.opts.Namespace), owner)
	}
	if err != nil {
		return nil, fmt.Errorf("listing leases of %s: %w", o.identity, err)
	}
	out := ls.Items[:0]
	for _, l := range ls.Items {
		if o.owns(&l) {
			out = append(out, l)
		}
	}
	return out, nil
}

// writeLedger stores entries as the owner's ledger: an update fenced by
// the resourceVersion read, or a create when there was none. Losing a race
// is a conflict (or AlreadyExists), for the caller to retry from a new read.
func (s *Service) writeLedger(ctx context.Context, o ledgerOwner, led ledger, entries map[string]ledgerEntry) error {
	data := make(map[string]string, len(entries))
	for name, e := range entries {
		raw, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encoding a ledger entry: %w", err)
		}
		data[name] = string(raw)
	}
	if led.cm == nil {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:        LedgerName(o.hash()),
				Namespace:   s.opts.Namespace,
				Labels:      map[string]string{LabelLedger: "true", kobev1.LabelRequesterHash: o.hash()},
				Annotations: map[string]string{annotationLedgerPolicy: o.policy, annotationLedgerIdentity: o.identity},
			},
			Data: data,
		}
		if err := s.opts.Client.Create(ctx, cm); err != nil {
			return fmt.Errorf("creating lease ledger %s: %w", cm.Name, err)
		}
		return nil
	}
	cm := led.cm.DeepCopy()
	cm.Data = data
	if err := s.opts.Client.Update(ctx, cm); err != nil {
		return fmt.Errorf("writing lease ledger %s: %w", cm.Name, err)
	}
	return nil
}

// updateLedger applies change to the owner's ledger until a write of it
// wins: change sees the tally at the moment of the read and returns the
// entries to write, or nil to write nothing, or a refusal.
//
// With everything false, change counts entries only (tally.queued and
// tally.keep; tally.held and tally.aliasHolder stay empty): the entries'
// leases are read (entryLeases), not all of the owner's.
func (s *Service) updateLedger(ctx context.Context, o ledgerOwner, alias string, everything bool, change func(t tally) (map[string]ledgerEntry, error)) error {
	lostRace := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	return retry.OnError(ledgerBackoff, lostRace, func() error {
		var (
			led    ledger
			leases []kobev1.ClusterLease
			err    error
		)
		if everything {
			led, leases, err = s.readLedger(ctx, o)
		} else if led, err = s.readLedgerOnly(ctx, o); err == nil {
			leases, err = s.entryLeases(ctx, o, led)
		}
		if err != nil {
			return err
		}
		t := count(led.entries, leases, alias, s.opts.Clock.Now())
		entries, err := change(t)
		if err != nil || entries == nil {
			return err
		}
		return s.writeLedger(ctx, o, led, entries)
	})
}

// reserve writes the ledger entry of l, a lease of p not created yet,
// unless p's limit or alias refuses it.
func (s *Service) reserve(ctx context.Context, p *auth.Principal, l *kobev1.ClusterLease, alias string) error {
	limit, limited := p.MaxConcurrentLeases()
	return s.updateLedger(ctx, ownerOf(p), alias, true, func(t tally) (map[string]ledgerEntry, error) {
		if t.aliasHolder != "" {
			return nil, aliasInUse(t.aliasHolder, alias)
		}
		if limited && t.held >= limit {
			return nil, leaseLimit(p, t.held, limit)
		}
		entries := maps.Clone(t.keep)
		entries[l.Name] = ledgerEntry{At: s.opts.Clock.Now().UTC(), Alias: alias}
		return entries, nil
	})
}

// limitSource says where a default lease limit comes from; "" for a rule's.
func limitSource(p *auth.Principal) string {
	if p.RuleCapsLeases() {
		return ""
	}
	return " (the server's default: the policy's rule sets no maxConcurrentLeases)"
}

// dropEntry removes the entry of lease name from p's ledger; best effort,
// since an entry of a lease never created stops counting after
// ReservationGrace anyway.
func (s *Service) dropEntry(ctx context.Context, p *auth.Principal, name string) {
	err := s.updateLedger(ctx, ownerOf(p), "", false, func(t tally) (map[string]ledgerEntry, error) {
		if _, ok := t.keep[name]; !ok {
			return nil, nil
		}
		entries := maps.Clone(t.keep)
		delete(entries, name)
		return entries, nil
	})
	if err != nil {
		s.opts.Log.V(1).Info("Could not drop a lease ledger entry; it expires", "lease", name, "error", err.Error())
	}
}

// takeQueueSlot gives l, a lease of p that could not be bound at once, one
// of p's queue slots, or refuses it with ErrQueueLimit when p's leases
// already hold max.
func (s *Service) takeQueueSlot(ctx context.Context, p *auth.Principal, l *kobev1.ClusterLease, alias string, max int32) error {
	return s.updateLedger(ctx, ownerOf(p), "", false, func(t tally) (map[string]ledgerEntry, error) {
		if t.queued >= max {
			return nil, queueLimit(p, t.queued)
		}
		entries := maps.Clone(t.keep)
		entries[l.Name] = ledgerEntry{At: s.opts.Clock.Now().UTC(), Alias: alias, Queued: true}
		return entries, nil
	})
}
