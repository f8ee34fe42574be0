package pool

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/truncate"
)

// The failure streak is the pool's own status, derived from its members by
// the pool controller alone:
//
//  1. A member that fails to become Ready moves to Recycling with a failure
//     reason and is deleted (Failed says which members those are).
//  2. The pool controller counts each such member once (status.failures,
//     creatingTimeouts, lastFailure) and names it in
//     status.countedFailures, in one fenced status write.
//  3. The instance controller removes the failed member's finalizer only
//     once the pool names it there (or the pool is gone), so no failure
//     is deleted before it was counted; its name leaves the list when the
//     member is gone.
//
// A member that became Ready after the last counted failure ends the streak
// (failures and creatingTimeouts back to 0; lastFailure stays as history).

// MaxCountedFailures bounds status.countedFailures (the CRD's maxItems):
// failed members beyond it wait, still present, for the next count.
const MaxCountedFailures = 256

// Failed reports whether m failed to become Ready: it left Creating for
// Recycling with a failure reason without ever being Ready. reason and
// message are its Ready condition's.
func Failed(m *kobev1.ClusterInstance) (reason, message string, ok bool) {
	if m.Status.Phase != kobev1.InstanceRecycling || m.Status.TimeToReady != nil || m.Status.LastPhaseChange == nil {
		return "", "", false
	}
	c := meta.FindStatusCondition(m.Status.Conditions, kobev1.ConditionReady)
	if c == nil || !failureReasons[c.Reason] {
		return "", "", false
	}
	return c.Reason, c.Message, true
}

// CountedFailure is one failure CountFailures added to the streak.
type CountedFailure struct {
	Member, Reason string
}

// CountFailures brings the pool's failure streak up to date with members:
// it counts each failed member not yet named in status.countedFailures
// (oldest first), forgets the names of members no longer failed or present,
// and ends the streak when a member became Ready after the last failure.
// It returns the failures it counted. Pure and idempotent: calling it
// again with the same members changes nothing.
func CountFailures(st *kobev1.ClusterPoolStatus, members []kobev1.ClusterInstance) []CountedFailure {
	failed := make([]*kobev1.ClusterInstance, 0)
	for i := range members {
		if _, _, ok := Failed(&members[i]); ok {
			failed = append(failed, &members[i])
		}
	}
	// Names of members still failed stay; the others are gone (or never
	// were failures, for a status edited by hand).
	st.CountedFailures = slices.DeleteFunc(st.CountedFailures, func(name string) bool {
		return !slices.ContainsFunc(failed, func(m *kobev1.ClusterInstance) bool { return m.Name == name })
	})
	readyAt, anyReady := lastReady(members)
	if lf := st.LastFailure; lf != nil && (st.Failures > 0 || st.CreatingTimeouts > 0) && anyReady && readyAt.After(lf.Time.Time) {
		st.Failures, st.CreatingTimeouts = 0, 0
	}
	slices.SortFunc(failed, func(a, b *kobev1.ClusterInstance) int {
		if c := a.Status.LastPhaseChange.Compare(b.Status.LastPhaseChange.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var counted []CountedFailure
	for _, m := range failed {
		if slices.Contains(st.CountedFailures, m.Name) || len(st.CountedFailures) >= MaxCountedFailures {
			continue
		}
		reason, msg, _ := Failed(m)
		st.CountedFailures = append(st.CountedFailures, m.Name)
		counted = append(counted, CountedFailure{Member: m.Name, Reason: reason})
		// A failure from before the last Ready member does not extend
		// the streak that member ended.
		if anyReady && readyAt.After(m.Status.LastPhaseChange.Time) {
			continue
		}
		st.Failures++
		if reason == kobev1.ReasonCreatingTimeout {
			st.CreatingTimeouts++
		}
		if lf := st.LastFailure; lf == nil || !lf.Time.After(m.Status.LastPhaseChange.Time) {
			st.LastFailure = &kobev1.MemberFailure{
				Member: m.Name, Reason: reason, Message: truncate.UTF8(msg, maxFailureMessage),
				Time: *m.Status.LastPhaseChange, TemplateHash: m.Spec.TemplateHash,
			}
		}
	}
	return counted
}

// lastReady is the latest moment a present member became Ready.
func lastReady(members []kobev1.ClusterInstance) (at time.Time, ok bool) {
	for i := range members {
		m := &members[i]
		if m.Status.TimeToReady == nil {
			continue
		}
		if t := m.CreationTimestamp.Add(m.Status.TimeToReady.Duration); !ok || t.After(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// maxFailureMessage is status.lastFailure.message's bound in the CRD.
const maxFailureMessage = 1024
