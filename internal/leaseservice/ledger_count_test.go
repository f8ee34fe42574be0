package leaseservice

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// TestCount tables what a ledger and an owner's leases add up to: what is
// held, what is queued, which lease holds an alias, and which entries are
// kept.
func TestCount(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	young, old := now.Add(-ReservationGrace+time.Second), now.Add(-ReservationGrace)
	mk := func(name string, phase kobev1.LeasePhase, alias string) kobev1.ClusterLease {
		l := kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		l.Status.Phase = phase
		if alias != "" {
			l.Labels[kobev1.LabelAlias] = alias
		}
		return l
	}
	deleting := mk("deleting", kobev1.LeasePending, "")
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	cases := []struct {
		name        string
		entries     map[string]ledgerEntry
		leases      []kobev1.ClusterLease
		alias       string
		held        int32
		queued      int32
		aliasHolder string
		keep        []string
	}{
		{name: "nothing"},
		{
			name:   "active leases count, ended ones do not",
			leases: []kobev1.ClusterLease{mk("a", kobev1.LeaseBound, ""), mk("b", kobev1.LeasePending, ""), mk("c", "", ""), mk("d", kobev1.LeaseReleased, ""), deleting},
			held:   3,
		},
		{
			name:    "a young entry of a lease not listed counts; an old one is pruned",
			entries: map[string]ledgerEntry{"new": {At: young}, "stale": {At: old}},
			held:    1, keep: []string{"new"},
		},
		{
			name:    "an entry of a listed lease is not counted twice and is pruned",
			entries: map[string]ledgerEntry{"a": {At: young}, "d": {At: young}},
			leases:  []kobev1.ClusterLease{mk("a", kobev1.LeaseBound, ""), mk("d", kobev1.LeaseExpired, "")},
			held:    1,
		},
		{
			name:    "a queue slot counts while its lease is queued",
			entries: map[string]ledgerEntry{"p": {At: old, Queued: true}, "q": {At: old, Queued: true}, "b": {At: old, Queued: true}, "e": {At: young, Queued: true}},
			leases:  []kobev1.ClusterLease{mk("p", kobev1.LeasePending, ""), mk("q", "", ""), mk("b", kobev1.LeaseBound, ""), mk("e", kobev1.LeaseReleased, "")},
			held:    3, queued: 2, keep: []string{"p", "q"},
		},
		{
			name:    "a queue slot of a lease not listed yet counts until the grace",
			entries: map[string]ledgerEntry{"n": {At: young, Queued: true}, "gone": {At: old, Queued: true}},
			held:    1, queued: 1, keep: []string{"n"},
		},
		{
			name:    "a queued lease without a slot is held but takes no slot",
			leases:  []kobev1.ClusterLease{mk("p", kobev1.LeasePending, "")},
			held:    1,
			entries: map[string]ledgerEntry{},
		},
		{
			name:   "alias held by an active lease",
			leases: []kobev1.ClusterLease{mk("a", kobev1.LeaseBound, "x"), mk("old", kobev1.LeaseReleased, "y")},
			alias:  "x", held: 1, aliasHolder: "a",
		},
		{
			name:   "alias of an ended lease is free",
			leases: []kobev1.ClusterLease{mk("old", kobev1.LeaseReleased, "y")},
			alias:  "y",
		},
		{
			name:    "alias held by a reservation in flight, not by a stale one",
			entries: map[string]ledgerEntry{"r": {At: young, Alias: "x"}, "s": {At: old, Alias: "z"}},
			alias:   "x", held: 1, aliasHolder: "r", keep: []string{"r"},
		},
		{
			name:    "stale reservation does not hold its alias",
			entries: map[string]ledgerEntry{"s": {At: old, Alias: "z"}},
			alias:   "z",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := count(c.entries, c.leases, c.alias, now)
			if got.held != c.held || got.queued != c.queued || got.aliasHolder != c.aliasHolder {
				t.Errorf("held %d queued %d alias holder %q; want %d, %d, %q", got.held, got.queued, got.aliasHolder, c.held, c.queued, c.aliasHolder)
			}
			if len(got.keep) != len(c.keep) {
				t.Errorf("kept %v, want %v", got.keep, c.keep)
			}
			for _, k := range c.keep {
				if _, ok := got.keep[k]; !ok {
					t.Errorf("kept %v, want %v", got.keep, c.keep)
				}
			}
		})
	}
}
