package clusterlease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/retention"
)

// Audit records: who held which member, from when to when, under which
// policy. A lease is deleted after --lease-retention and its Events expire
// after an hour, so each bound lease that ends leaves a ConfigMap of its
// own, kobe-audit-<lease UID>, in the lease's namespace, kept for
// AuditRetention (--audit-retention) and then deleted by AuditJanitor. It
// has no owner (it must outlive the lease), is immutable once written, and
// is written before the ended lease may be deleted.
const (
	// AuditLabel marks audit records; its value is AuditLabelValue.
	AuditLabel      = "kobe.kunobi.ninja/audit"
	AuditLabelValue = "lease"
	// DefaultAuditRetention is how long audit records are kept by default.
	DefaultAuditRetention = 30 * 24 * time.Hour
	// auditPrefix names audit records: kobe-audit-<lease UID>.
	auditPrefix = "kobe-audit-"
)

// Keys of an audit record's data.
const (
	AuditKeyLease      = "lease"
	AuditKeyLeaseUID   = "leaseUID"
	AuditKeyPool       = "pool"
	AuditKeyIdentity   = "identity"
	AuditKeyPolicy     = "policy"
	AuditKeyMethod     = "method"
	AuditKeyMember     = "member"
	AuditKeyMemberUID  = "memberUID"
	AuditKeyBoundAt    = "boundAt"
	AuditKeyExpiresAt  = "expiresAt"
	AuditKeyEndedAt    = "endedAt"
	AuditKeyEndReason  = "endReason"
	AuditKeyEndMessage = "endMessage"
	AuditKeyExtensions = "extensions"
)

// AuditRecordName is the name of the audit record of the lease with uid.
func AuditRecordName(l *kobev1.ClusterLease) string { return auditPrefix + string(l.UID) }

// auditRecord is the audit record of an ended lease that held a member;
// nil for a lease that never held one (nobody held anything). The member
// that names the lease (its write-once leaseRef is the record of the bind)
// is preferred over the lease's status: a lease released before its status
// copy was written names no member, and a status can be forged.
func auditRecord(l *kobev1.ClusterLease, member *kobev1.ClusterInstance) *corev1.ConfigMap {
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
		AuditKeyLease:      l.Name,
		AuditKeyLeaseUID:   string(l.UID),
		AuditKeyPool:       l.Spec.Pool,
		AuditKeyIdentity:   l.Spec.Requester.Identity,
		AuditKeyPolicy:     l.Spec.Requester.Policy,
		AuditKeyMethod:     l.Spec.Requester.Method,
		AuditKeyMember:     memberName,
		AuditKeyMemberUID:  memberUID,
		AuditKeyEndedAt:    st.EndedAt.UTC().Format(time.RFC3339),
		AuditKeyExtensions: strconv.Itoa(int(st.Extensions)),
	}
	if boundAt != nil {
		data[AuditKeyBoundAt] = boundAt.UTC().Format(time.RFC3339)
	}
	if st.ExpiresAt != nil {
		data[AuditKeyExpiresAt] = st.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if c := meta.FindStatusCondition(st.Conditions, kobev1.ConditionEnded); c != nil {
		data[AuditKeyEndReason], data[AuditKeyEndMessage] = c.Reason, c.Message
	}
	labels := map[string]string{AuditLabel: AuditLabelValue}
	// Labels to select by, where the value fits a label; the data has all.
	for k, v := range map[string]string{kobev1.LabelLease: l.Name, kobev1.LabelPool: l.Spec.Pool} {
		if len(validation.IsValidLabelValue(v)) == 0 {
			labels[k] = v
		}
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: AuditRecordName(l), Namespace: l.Namespace, Labels: labels},
		Immutable:  ptr.To(true),
		Data:       data,
	}
}

// auditRetention is AuditRetention, or its default.
func (r *Reconciler) auditRetention() time.Duration {
	if r.AuditRetention > 0 {
		return r.AuditRetention
	}
	return DefaultAuditRetention
}

// audit writes the audit record of an ended lease that held a member, and
// logs it, once: a record that exists already is left as it is. A lease
// that ended longer ago than the audit retention gets none (it would only
// be deleted again).
func (r *Reconciler) audit(ctx context.Context, s *scope) error {
	if s.lease.Status.EndedAt == nil || s.lease.Status.EndedAt.Add(r.auditRetention()).Before(s.now) {
		return nil
	}
	key := client.ObjectKeyFromObject(s.lease)
	if r.audited.Has(key, s.lease.UID) {
		// An ended lease is reconciled several times (its member's
		// teardown wakes it): a create that fails with AlreadyExists is
		// still a write kube-apiserver serves. After a restart the record
		// is tried once more.
		return nil
	}
	member, err := r.namingMember(ctx, s.lease, false)
	if err == nil && member == nil && s.lease.Status.InstanceRef == nil {
		// The cache may not have seen a bind made moments before the end.
		member, err = r.namingMember(ctx, s.lease, true)
	}
	if err != nil {
		return err
	}
	rec := auditRecord(s.lease, member)
	if rec == nil {
		return nil
	}
	if err := r.Client.Create(ctx, rec); err != nil {
		if apierrors.IsAlreadyExists(err) {
			r.audited.Add(key, s.lease.UID)
			return nil
		}
		return fmt.Errorf("writing audit record %s of lease %s: %w", rec.Name, s.lease.Name, err)
	}
	r.audited.Add(key, s.lease.UID)
	d := rec.Data
	s.log.Info("Lease audit record", "record", rec.Name, "lease", d[AuditKeyLease], "leaseUID", d[AuditKeyLeaseUID],
		"pool", d[AuditKeyPool], "identity", d[AuditKeyIdentity], "policy", d[AuditKeyPolicy], "method", d[AuditKeyMethod],
		"member", d[AuditKeyMember], "memberUID", d[AuditKeyMemberUID], "boundAt", d[AuditKeyBoundAt],
		"endedAt", d[AuditKeyEndedAt], "endReason", d[AuditKeyEndReason])
	return nil
}

// AuditJanitor deletes audit records older than Retention (by their
// endedAt), at start and then every Interval, on the leader only
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
		Labels:   client.MatchingLabels{AuditLabel: AuditLabelValue},
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
		if t, err := time.Parse(time.RFC3339, cm.Data[AuditKeyEndedAt]); err == nil && t.Before(ended) {
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
