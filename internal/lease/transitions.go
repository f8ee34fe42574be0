package lease

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// End ends l in memory at now: phase, endedAt, no queue position, the Ended
// condition True with reason and msg, and the Bound condition False when it
// was True. The caller persists it with a Status().Update fenced by l's
// resourceVersion. A lease that has already ended keeps its first end: the
// reason it ended does not change afterwards.
func End(l *kobev1.ClusterLease, phase kobev1.LeasePhase, reason, msg string, now time.Time) {
	if IsEnded(l.Status.Phase) {
		return
	}
	l.Status.Phase = phase
	t := metav1.NewTime(now.UTC())
	l.Status.EndedAt = &t
	l.Status.QueuePosition = 0
	l.Status.ObservedGeneration = l.Generation
	meta.SetStatusCondition(&l.Status.Conditions, metav1.Condition{
		Type: kobev1.ConditionEnded, Status: metav1.ConditionTrue, Reason: reason, Message: msg,
		ObservedGeneration: l.Generation, LastTransitionTime: t,
	})
	if c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionBound); c != nil && c.Status == metav1.ConditionTrue {
		meta.SetStatusCondition(&l.Status.Conditions, metav1.Condition{
			Type: kobev1.ConditionBound, Status: metav1.ConditionFalse, Reason: reason, Message: msg,
			ObservedGeneration: l.Generation, LastTransitionTime: t,
		})
	}
}

// ErrNotBound is returned when extending a lease that holds no member.
var ErrNotBound = errors.New("lease is not bound")

// ErrBadExtension is returned for an extension that is not positive.
var ErrBadExtension = errors.New("extension must be positive")

// ErrExpired is returned when extending a lease whose expiry has passed: the
// operator is ending it, and an extension must not bring it back.
var ErrExpired = errors.New("lease has expired")

// ErrExtensionLimit is returned when a lease has used all its extensions.
var ErrExtensionLimit = errors.New("extension limit reached")

// Extend applies one extension of by to l in memory: expiresAt moves by by
// and extensions counts one more. It refuses, leaving l unchanged, with an
// error wrapping ErrNotBound, ErrBadExtension, ErrExpired or
// ErrExtensionLimit. The caller persists l with a fenced Status().Update.
func Extend(l *kobev1.ClusterLease, by time.Duration, now time.Time) error {
	switch {
	case l.DeletionTimestamp != nil:
		return fmt.Errorf("%w (lease %s is being deleted)", ErrNotBound, l.Name)
	case l.Status.Phase != kobev1.LeaseBound || l.Status.ExpiresAt == nil:
		return fmt.Errorf("%w (phase %s)", ErrNotBound, phaseOrPending(l.Status.Phase))
	case by <= 0:
		return fmt.Errorf("%w, got %s", ErrBadExtension, by)
	case !now.Before(l.Status.ExpiresAt.Time):
		return fmt.Errorf("%w at %s", ErrExpired, l.Status.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if maxExt := MaxExtensions(l); l.Status.Extensions >= maxExt {
		return fmt.Errorf("%w: lease %s was extended %d of %d allowed times", ErrExtensionLimit, l.Name, l.Status.Extensions, maxExt)
	}
	expires := metav1.NewTime(l.Status.ExpiresAt.Add(by))
	l.Status.ExpiresAt = &expires
	l.Status.Extensions++
	return nil
}

func phaseOrPending(p kobev1.LeasePhase) kobev1.LeasePhase {
	if p == "" {
		return kobev1.LeasePending
	}
	return p
}
