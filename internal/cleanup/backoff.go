package cleanup

import (
	"time"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/truncate"
)

// Backoff of a Quarantined member's retries: 30 s after the first failed
// proof, doubling, at most an hour. Whatever kept the resource alive (a
// mount, an immutable file, a stuck process) rarely goes away by itself,
// so retries soon become rare; an administrator who removed it retries at
// once with the annotation.
const (
	BaseBackoff = 30 * time.Second
	MaxBackoff  = time.Hour
)

// Backoff is the wait after the attempts-th failed proof (attempts >= 1).
func Backoff(attempts int32) time.Duration {
	d := BaseBackoff
	for i := int32(1); i < attempts && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// RetryWait says how long a Quarantined member waits before its next
// attempt (<= 0: now), and the retry request it acts on when the
// kobe.kunobi.ninja/retry-cleanup annotation asks for one not acted on yet
// ("" otherwise).
func RetryWait(inst *kobev1.ClusterInstance, now time.Time) (time.Duration, string) {
	st := inst.Status.Cleanup
	req := inst.Annotations[kobev1.AnnotationRetryCleanup]
	// status.cleanup.retryRequest's bound; a rune cut in two would come
	// back from the API server changed and never match.
	req = truncate.UTF8(req, maxRetryRequest)
	if req != "" && (st == nil || st.RetryRequest != req) {
		return 0, req
	}
	if st == nil || st.NextAttempt == nil {
		return 0, ""
	}
	return st.NextAttempt.Sub(now), ""
}

// maxRetryRequest is status.cleanup.retryRequest's bound in the CRD.
const maxRetryRequest = 64
