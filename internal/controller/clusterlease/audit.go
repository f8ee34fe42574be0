package clusterlease

import (
	"context"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auditrecord"
	"github.com/kunobi-ninja/kobe/internal/retention"
)

// Audit records: who held which member, from when to when, under which
// policy. A lease is deleted after --lease-retention and its Events expire
// after an hour, so each bound lease that ends leaves a record, kept for
// AuditRetention (--audit-retention) and then deleted by AuditJanitor.
//
// Records are batched (issue 27: a ConfigMap per lease was one API write
// in every twelve of a lease-and-release cycle): the leases of one pool
// that ended in the same second share one ConfigMap,
// kobe-audit-<endedAt, Unix seconds>-<pool hash>[-<part>], in the leases'
// namespace, one data key per lease (its UID) holding the record as JSON.
// The name follows from the leases alone, so a restart or a second replica
// finds the records already written rather than writing them twice
// (auditbatch.go). A record has no owner (it must outlive the lease), is
// immutable once written, and is written before the ended lease may be
// deleted.
const (
	// DefaultAuditRetention is how long audit records are kept by default.
	DefaultAuditRetention = 30 * 24 * time.Hour
	// auditPrefix starts the names of audit ConfigMaps.
	auditPrefix = "kobe-audit-"
)

// auditRecord is the audit record of an ended lease that held a member;
// nil for a lease that never held one (nobody held anything). The member
// that names the lease (its write-once leaseRef is the record of the bind)
// is preferred over the lease's status: a lease released before its status
// copy was written names no member, and a status can be forged.
func auditRecord(l *kobev1.ClusterLease, member *kobev1.ClusterInstance) map[string]string {
	st := &l.Status
	if st.EndedAt == nil {
		return nil
	}
	var memberName, memberUID string
	boundAt := st.BoundAt
	switch {
	case member != nil && member.Spec.LeaseRef != nil:
		memberName, memberUID = member.Name, string(member.UID)
		if member.Spec.LeaseRef.BoundAt != nil {
			boundAt = member.Spec.LeaseRef.BoundAt
		}
	case st.InstanceRef != nil:
		memberName, memberUID = st.InstanceRef.Name, string(st.InstanceRef.UID)
	default:
		return nil
	}
	data := map[string]string{
		auditrecord.KeyLease:      l.Name,
		auditrecord.KeyLeaseUID:   string(l.UID),
		auditrecord.KeyPool:       l.Spec.Pool,
		auditrecord.KeyIdentity:   l.Spec.Requester.Identity,
		auditrecord.KeyPolicy:     l.Spec.Requester.Policy,
		auditrecord.KeyMethod:     l.Spec.Requester.Method,
		auditrecord.KeyMember:     memberName,
		auditrecord.KeyMemberUID:  memberUID,
		auditrecord.KeyEndedAt:    st.EndedAt.UTC().Format(time.RFC3339),
		auditrecord.KeyExtensions: strconv.Itoa(int(st.Extensions)),
	}
	if boundAt != nil {
		data[auditrecord.KeyBoundAt] = boundAt.UTC().Format(time.RFC3339)
	}
	if st.ExpiresAt != nil {
		data[auditrecord.KeyExpiresAt] = st.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if c := meta.FindStatusCondition(st.Conditions, kobev1.ConditionEnded); c != nil {
		data[auditrecord.KeyEndReason], data[auditrecord.KeyEndMessage] = c.Reason, c.Message
	}
	return data
}

// auditRetention is AuditRetention, or its default.
func (r *Reconciler) auditRetention() time.Duration {
	if r.AuditRetention > 0 {
		return r.AuditRetention
	}
	return DefaultAuditRetention
}

// audit has the audit record of an ended lease that held a member written,
// once, with the records of the other leases of its pool that ended in the
// same second (auditbatch.go). It says how long to wait when the record is
// not written yet: its batch is due to be written a moment after that
// second, by whichever of its leases is reconciled first then. A lease that
// ended longer ago than the audit retention gets none (it would only be
// deleted again).
func (r *Reconciler) audit(ctx context.Context, s *scope) (time.Duration, error) {
	if s.lease.Status.EndedAt == nil || s.lease.Status.EndedAt.Add(r.auditRetention()).Before(s.now) {
		return 0, nil
	}
	key := client.ObjectKeyFromObject(s.lease)
	if r.audited.Has(key, s.lease.UID) {
		// An ended lease is reconciled several times (its member's
		// teardown wakes it); its record is written once.
		return 0, nil
	}
	member, err := r.namingMember(ctx, s.lease, false)
	if err == nil && member == nil && s.lease.Status.InstanceRef == nil {
		// The cache may not have seen a bind made moments before the end.
		member, err = r.namingMember(ctx, s.lease, true)
	}
	if err != nil {
		return 0, err
	}
	rec := auditRecord(s.lease, member)
	if rec == nil {
		return 0, nil
	}
	b := bucketOf(s.lease)
	due := r.auditBatches.add(b, pendingRecord{key: key, uid: s.lease.UID, data: rec}, s.now)
	// An endedAt ahead of this replica's clock by more than a skew (written
	// by hand) must not hold the record back: its batch is written now.
	if wait := due.Sub(s.now); wait > 0 && wait <= auditMaxWait {
		return wait, nil
	}
	if err := r.flushAudit(ctx, s.log, b); err != nil {
		return 0, err
	}
	if r.audited.Has(key, s.lease.UID) {
		return 0, nil
	}
	// Another worker took the batch and is writing it.
	return auditRetry, nil
}

// AuditJanitor deletes audit ConfigMaps older than Retention (by the
// second their leases ended), at start and then every Interval, on the leader only
// (retention.Janitor).
type AuditJanitor struct {
	// Client deletes records; Reader lists them (the manager's APIReader:
	// ConfigMaps are not cached).
	Client    client.Client
	Reader    client.Reader
	Namespace string
	// Retention is how long records are kept; DefaultAuditRetention when
	// not positive (never "delete everything").
	Retention time.Duration
	// Interval between sweeps; one hour when zero.
	Interval time.Duration
	Clock    clock.PassiveClock
}

// NeedLeaderElection: only the leader deletes records.
func (j *AuditJanitor) NeedLeaderElection() bool { return true }

// Start sweeps until ctx ends; a failed sweep is logged and retried at the
// next interval.
func (j *AuditJanitor) Start(ctx context.Context) error {
	return j.janitor(ctrl.LoggerFrom(ctx).WithName("audit-janitor")).Start(ctx)
}

// Sweep deletes the audit records whose endedAt (or, unreadable, creation)
// is older than Retention, and says how many it deleted.
func (j *AuditJanitor) Sweep(ctx context.Context) (int, error) {
	return j.janitor(logr.Discard()).Sweep(ctx)
}

func (j *AuditJanitor) janitor(logger logr.Logger) *retention.Janitor {
	interval := j.Interval
	if interval <= 0 {
		interval = time.Hour
	}
	keep := j.retention()
	return &retention.Janitor{
		Kind: "audit record", Client: j.Client, Reader: j.Reader, Namespace: j.Namespace,
		Labels:   client.MatchingLabels{auditrecord.Label: auditrecord.LabelValue},
		NewList:  func() client.ObjectList { return &corev1.ConfigMapList{} },
		Deadline: func(o client.Object) (time.Time, bool) { return auditRecordExpiry(o, keep), true },
		Interval: interval, Clock: j.Clock, Log: logger,
	}
}

// auditRecordExpiry is when an audit record may be deleted: keep after the
// lease ended, or after the record was written when that was earlier or
// its endedAt cannot be read (a record is never kept longer than keep).
func auditRecordExpiry(o client.Object, keep time.Duration) time.Time {
	ended := o.GetCreationTimestamp().Time
	if cm, ok := o.(*corev1.ConfigMap); ok {
		stamp, ok := cm.Annotations[auditrecord.EndedAtAnnotation]
		if !ok {
			stamp = cm.Data[auditrecord.KeyEndedAt] // a record from before the batches
		}
		if t, err := time.Parse(time.RFC3339, stamp); err == nil && t.Before(ended) {
			ended = t
		}
	}
	return ended.Add(keep)
}

func (j *AuditJanitor) retention() time.Duration {
	if j.Retention > 0 {
		return j.Retention
	}
	return DefaultAuditRetention
}
