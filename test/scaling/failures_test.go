//go:build heavy

package scaling

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestCreateFailuresBackOffAndRecover: every member of a sim pool with
// failurePercent 100 fails; the pool counts the failures in a row, says why
// (Capacity CreateBackoff naming the last failure, Provisioning
// CreateFailures, phase Degraded) and creates ever more slowly; once the
// template no longer fails, members become Ready and the streak resets.
func TestCreateFailuresBackOffAndRecover(t *testing.T) {
	t.Parallel()
	const name = "backoff"
	start := time.Now()
	members := watchMembers(t, namespace, name)
	pools := watchPool(t, namespace, name)
	p := simPool(namespace, name, kobev1.SimBackendSpec{ReadyAfter: dur(time.Second), FailurePercent: 100})
	p.Spec.Size = ptr.To[int32](2)
	createPool(t, p)

	failing := waitPool(t, namespace, name, time.Minute, "backing off after failures in a row", func(p *kobev1.ClusterPool) error {
		if p.Status.Failures < 2 {
			return errors.New("fewer than 2 failures")
		}
		if f := p.Status.LastFailure; f == nil || f.Reason != kobev1.ReasonProvisionFailed || f.Member == "" {
			return fmt.Errorf("lastFailure %+v", f)
		}
		if p.Status.Phase != kobev1.PoolDegraded {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		if err := hasCondition(p, kobev1.ConditionProvisioning, metav1.ConditionFalse, kobev1.ReasonCreateFailures); err != nil {
			return err
		}
		if err := hasCondition(p, kobev1.ConditionCapacity, metav1.ConditionFalse, kobev1.ReasonCreateBackoff); err != nil {
			return err
		}
		c := findCondition(p, kobev1.ConditionCapacity)
		if !strings.Contains(c.Message, kobev1.ReasonProvisionFailed) || !strings.Contains(c.Message, fmt.Sprint(p.Status.Failures)) {
			return fmt.Errorf("Capacity message %q names neither the last failure's reason nor the count %d", c.Message, p.Status.Failures)
		}
		return nil
	})
	t.Logf("%s: backing off: %s; Capacity: %s", since(start), brief(failing), findCondition(failing, kobev1.ConditionCapacity).Message)

	// Creates come in rounds, each after a longer wait than the one
	// before (5 s x 2^(failures-1), and every round adds at least 2
	// failures, so the second wait is at least four times the first).
	// Waiting for a third round could take up to the 5 min cap, so the
	// test watches the second wait for the first one's length plus 5 s
	// and sees nothing created.
	var rounds []time.Time
	testenv.Eventually(t, 2*time.Minute, "two rounds of creates", func() error {
		_, at := created(members.snapshot(t))
		if rounds = roundsOf(at, 3*time.Second); len(rounds) < 2 {
			return fmt.Errorf("%d rounds at %v", len(rounds), rounds)
		}
		return nil
	})
	first := rounds[1].Sub(rounds[0])
	if first < 5*time.Second {
		t.Errorf("rounds of creates %s apart: want at least the first backoff (5s)", first)
	}
	var settled time.Time
	testenv.Eventually(t, time.Minute, "every member so far to fail", func() error {
		ev := members.snapshot(t)
		names, _ := created(ev)
		fs := failures(ev)
		if len(fs) < len(names) {
			return fmt.Errorf("%d of %d members failed", len(fs), len(names))
		}
		if settled = fs[len(fs)-1].at; time.Since(settled) < 2*time.Second {
			return errors.New("a member failed less than 2s ago")
		}
		return nil
	})
	testenv.Consistently(t, max(time.Until(settled.Add(first+5*time.Second)), 0), "no create before the first backoff plus 5s", func() error {
		names, at := created(members.snapshot(t))
		for i, c := range at {
			if c.After(settled) {
				return fmt.Errorf("%s was created %s after the second round failed, sooner than the first backoff (%s) plus 5s: the backoff did not grow",
					names[i], c.Sub(settled).Round(100*time.Millisecond), first.Round(100*time.Millisecond))
			}
		}
		return nil
	})
	names, at := created(members.snapshot(t))
	t.Logf("%s: rounds of creates %s apart, then nothing for %s", since(start), first.Round(100*time.Millisecond), time.Since(settled).Round(100*time.Millisecond))
	// Each create waited out the backoff that the pool's status asked for
	// a second before (the operator's cache has surely seen it by then;
	// both failures and lastFailure only grow while every member fails).
	statuses := pools.snapshot(t)
	for i, c := range at {
		var view *kobev1.ClusterPool
		for _, e := range statuses {
			if !e.at.Add(time.Second).Before(c) {
				break
			}
			view = e.obj
		}
		t.Logf("created %s at %s", names[i], c.Sub(start).Round(100*time.Millisecond))
		if view == nil || view.Status.Failures == 0 || view.Status.LastFailure == nil {
			continue
		}
		f := view.Status.Failures
		wait := min(5*time.Second<<min(f-1, 10), 5*time.Minute)
		if allowed := view.Status.LastFailure.Time.Add(wait); c.Before(allowed) {
			t.Errorf("%s was created at %s, before the backoff after %d failures (the last at %s) ended at %s",
				names[i], c.UTC(), f, view.Status.LastFailure.Time.UTC(), allowed.UTC())
		}
	}
	// Nor may a create follow a member's failure at once, whether or not
	// the pool's count of it was written yet: the shortest backoff is 5 s
	// after lastFailure.time, which is at most a second (truncation) plus
	// the watch's delay before the test saw the member fail; 2 s is the
	// margin.
	failedAt := failures(members.snapshot(t))
	for i, c := range at {
		for _, f := range failedAt {
			if f.at.Before(c) && c.Sub(f.at) < 2*time.Second {
				t.Errorf("%s was created %s after %s failed: no backoff", names[i], c.Sub(f.at).Round(10*time.Millisecond), f.name)
			}
		}
	}
	if p := mustPool(t, namespace, name); p.Status.Failures < 4 || int(p.Status.Failures) < len(names) {
		t.Errorf("failures %d after %d members failed in two rounds", p.Status.Failures, len(names))
	}

	// The template is fixed: the backoff of the old one no longer applies.
	cur := mustPool(t, namespace, name)
	patch := client.MergeFrom(cur.DeepCopy())
	cur.Spec.Backend.Sim.FailurePercent = 0
	if err := s.Env.Client.Patch(t.Context(), cur, patch); err != nil {
		t.Fatalf("patching failurePercent: %v", err)
	}
	fixed := time.Now()
	waitPool(t, namespace, name, time.Minute, "recovered", func(p *kobev1.ClusterPool) error {
		if p.Status.Ready != 2 || p.Status.Failures != 0 || p.Status.CreatingTimeouts != 0 {
			return errors.New("not recovered")
		}
		if p.Status.Phase != kobev1.PoolHealthy {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		if err := hasCondition(p, kobev1.ConditionProvisioning, metav1.ConditionTrue, kobev1.ReasonMembersSucceeding); err != nil {
			return err
		}
		return hasCondition(p, kobev1.ConditionCapacity, metav1.ConditionTrue, kobev1.ReasonCapacityAvailable)
	})
	t.Logf("%s: recovered %s after the fix", since(start), time.Since(fixed).Round(100*time.Millisecond))
}

// failure is a member the test saw fail: leave Creating for Recycling (or
// deletion) without ever being Ready.
type failure struct {
	name string
	at   time.Time
}

// failures lists the members that failed, in the order the watch saw them.
func failures(events []seen[*kobev1.ClusterInstance]) []failure {
	var out []failure
	done := map[string]bool{}
	for _, e := range events {
		m := e.obj
		switch {
		case done[m.Name]:
		case m.Status.Phase == kobev1.InstanceReady || m.Status.Phase == kobev1.InstanceLeased:
			done[m.Name] = true
		case m.Status.Phase == kobev1.InstanceRecycling || m.DeletionTimestamp != nil:
			done[m.Name] = true
			out = append(out, failure{name: m.Name, at: e.at})
		}
	}
	return out
}

// roundsOf groups instants (in order) into rounds: an instant within gap of
// its round's first belongs to it. It returns each round's first instant.
func roundsOf(at []time.Time, gap time.Duration) []time.Time {
	var rounds []time.Time
	for _, a := range at {
		if len(rounds) == 0 || a.Sub(rounds[len(rounds)-1]) > gap {
			rounds = append(rounds, a)
		}
	}
	return rounds
}

// TestCreatingTimeoutChurnIsReported: members that take longer to build
// than creatingTimeout are reaped again and again; the pool reports it as
// churn (Provisioning MembersChurn, status.creatingTimeouts, a Warning
// event), so that an administrator raises creatingTimeout.
func TestCreatingTimeoutChurnIsReported(t *testing.T) {
	t.Parallel()
	const name = "churn"
	start := time.Now()
	p := simPool(namespace, name, kobev1.SimBackendSpec{ReadyAfter: dur(30 * time.Second)})
	p.Spec.Size = ptr.To[int32](2)
	p.Spec.CreatingTimeout = dur(2 * time.Second)
	createPool(t, p)

	churn := waitPool(t, namespace, name, time.Minute, "churn reported", func(p *kobev1.ClusterPool) error {
		if p.Status.CreatingTimeouts < 2 || p.Status.Failures < p.Status.CreatingTimeouts {
			return errors.New("fewer than 2 creatingTimeouts in a row")
		}
		if f := p.Status.LastFailure; f == nil || f.Reason != kobev1.ReasonCreatingTimeout {
			return fmt.Errorf("lastFailure %+v", f)
		}
		if err := hasCondition(p, kobev1.ConditionProvisioning, metav1.ConditionFalse, kobev1.ReasonMembersChurn); err != nil {
			return err
		}
		if c := findCondition(p, kobev1.ConditionProvisioning); !strings.Contains(c.Message, "creatingTimeout") {
			return fmt.Errorf("Provisioning message %q does not name creatingTimeout", c.Message)
		}
		return nil
	})
	t.Logf("%s: churn: %s; Provisioning: %s", since(start), brief(churn), findCondition(churn, kobev1.ConditionProvisioning).Message)
	testenv.Eventually(t, 30*time.Second, "a Warning event MembersChurn about the pool", func() error {
		evs, err := poolEvents(t.Context(), namespace, name, kobev1.ReasonMembersChurn)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("events %+v", evs)
	})
}
