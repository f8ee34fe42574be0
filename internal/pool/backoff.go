package pool

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// Create backoff: after F members failed in a row the pool waits
// CreateBackoffBase x 2^(F-1), at most CreateBackoffMax, after the last
// failure before it creates the next member.
const (
	CreateBackoffBase = 5 * time.Second
	CreateBackoffMax  = 5 * time.Minute
)

// churnTimeouts is how many members in a row reaped by creatingTimeout are
// reported as churn rather than failures.
const churnTimeouts = 2

// defaultCreatingTimeout is the CRD's default spec.creatingTimeout, named in
// the churn message when the pool leaves it unset.
const defaultCreatingTimeout = 10 * time.Minute

// backoffAfter is the wait after f consecutive failures.
func backoffAfter(f int32) time.Duration {
	if f <= 0 {
		return 0
	}
	if f > 7 { // 5s x 2^7 is past the cap already; never shift further
		return CreateBackoffMax
	}
	return min(CreateBackoffBase<<(f-1), CreateBackoffMax)
}

// createBackoff is how long the pool still waits before it may create a
// member; 0 when it need not. Only the current template's failures count: a
// changed template ends the backoff.
func createBackoff(st *kobev1.ClusterPoolStatus, hash string, now time.Time) time.Duration {
	lf := st.LastFailure
	if st.Failures <= 0 || lf == nil || lf.TemplateHash != hash {
		return 0
	}
	return max(0, lf.Time.Add(backoffAfter(st.Failures)).Sub(now))
}

// failureReasons are the reasons a member leaves Creating with that count as
// a pool failure.
var failureReasons = map[string]bool{
	kobev1.ReasonProvisionFailed:    true,
	kobev1.ReasonBackendUnavailable: true,
	kobev1.ReasonCreatingTimeout:    true,
	kobev1.ReasonBootstrapFailed:    true,
}

// backoffMessage is the Capacity message while creates wait.
func backoffMessage(st *kobev1.ClusterPoolStatus, left time.Duration) string {
	lf := st.LastFailure
	return fmt.Sprintf("%d members failed to become Ready in a row, the last %s (%s: %s); the pool waits %s after a failure before it creates the next member: %s left",
		st.Failures, lf.Member, lf.Reason, lf.Message, backoffAfter(st.Failures), left.Round(time.Second))
}

// provisioningCondition says whether the members the pool creates become
// Ready: churn (members reaped by creatingTimeout again and again) says
// more than failures alone, so it wins.
func provisioningCondition(p *kobev1.ClusterPool) metav1.Condition {
	st := &p.Status
	c := metav1.Condition{Type: kobev1.ConditionProvisioning, Status: metav1.ConditionFalse}
	switch {
	case st.CreatingTimeouts >= churnTimeouts:
		timeout := defaultCreatingTimeout
		if ct := p.Spec.CreatingTimeout; ct != nil && ct.Duration > 0 {
			timeout = ct.Duration
		}
		c.Reason = kobev1.ReasonMembersChurn
		c.Message = fmt.Sprintf("%d members in a row were reaped by creatingTimeout %s before becoming Ready; raise creatingTimeout", st.CreatingTimeouts, timeout)
		if d := st.Demand; d != nil && d.ProvisionSeconds > 0 {
			c.Message += fmt.Sprintf(" (members of this pool take %ds to become Ready, the median of recent ones)", d.ProvisionSeconds)
		}
	case st.Failures > 0:
		c.Reason = kobev1.ReasonCreateFailures
		c.Message = fmt.Sprintf("%d members failed to become Ready in a row", st.Failures)
		if lf := st.LastFailure; lf != nil {
			c.Message += fmt.Sprintf(", the last %s at %s (%s: %s)", lf.Member, lf.Time.UTC().Format(time.RFC3339), lf.Reason, lf.Message)
		}
	default:
		c.Status, c.Reason = metav1.ConditionTrue, kobev1.ReasonMembersSucceeding
		c.Message = "no member has failed since the last one became Ready"
	}
	return c
}
