package clusterlease

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auditrecord"
)

const (
	// auditFlushDelay is how long after its second a batch is written: the
	// leases that ended within that second have been reconciled by then
	// (each end is a status write the watch brings within milliseconds).
	// A lease that comes later still gets its record, in a part of its own.
	auditFlushDelay = 500 * time.Millisecond
	// auditMaxWait bounds the wait for a batch: more means an endedAt in
	// the future.
	auditMaxWait = 10 * time.Second
	// auditRetry is how soon a lease whose batch another worker is writing
	// looks again.
	auditRetry = time.Second
	// auditPartBytes bounds the records of one ConfigMap (at most 1 MiB
	// each); a batch past it spills into further parts.
	auditPartBytes = 512 << 10
)

// auditBucket names the leases whose records share one audit ConfigMap:
// those of one pool, in one namespace, that ended in the same second.
type auditBucket struct {
	namespace, pool string
	second          int64 // endedAt, Unix seconds
}

// bucketOf is the bucket of an ended lease. The stored endedAt has second
// precision, so every replica and every restart computes the same one.
func bucketOf(l *kobev1.ClusterLease) auditBucket {
	return auditBucket{namespace: l.Namespace, pool: l.Spec.Pool, second: l.Status.EndedAt.Unix()}
}

// due is when the bucket's batch is written.
func (b auditBucket) due() time.Time { return time.Unix(b.second+1, 0).Add(auditFlushDelay) }

// partName names the bucket's ConfigMaps: kobe-audit-<second>-<pool hash>,
// then -2, -3, ... A pool whose name hashes like another's in the same
// second finds that pool's part taken and writes the next one.
func (b auditBucket) partName(part int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(b.pool))
	name := fmt.Sprintf("%s%d-%08x", auditPrefix, b.second, h.Sum32())
	if part > 1 {
		name += "-" + strconv.Itoa(part)
	}
	return name
}

// AuditConfigMapName is the name of the first audit ConfigMap that may
// hold the record of the ended lease l (further parts add -2, -3, ...).
func AuditConfigMapName(l *kobev1.ClusterLease) string { return bucketOf(l).partName(1) }

// pendingRecord is the record of one ended lease, waiting for its batch.
type pendingRecord struct {
	key  types.NamespacedName
	uid  types.UID
	data map[string]string
}

// auditBatches holds the records waiting for their bucket's write. Only
// for a moment, and never the only copy: each is computed from an ended
// lease that is not deleted before its record is written, so a restart
// computes it again.
type auditBatches struct {
	mu      sync.Mutex
	pending map[auditBucket]map[types.UID]pendingRecord
	// opened is when each bucket's first waiting record came.
	opened map[auditBucket]time.Time
}

// add puts rec in bucket b's batch at now and says when the batch is due:
// a moment after its second (auditBucket.due), and no sooner than
// auditFlushDelay after its first record came. The second bound gathers
// the leases of a backlog: a lease controller that runs behind reconciles
// a second's ended leases one after another, all past their second's due.
func (a *auditBatches) add(b auditBucket, rec pendingRecord, now time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = map[auditBucket]map[types.UID]pendingRecord{}
		a.opened = map[auditBucket]time.Time{}
	}
	if a.pending[b] == nil {
		a.pending[b] = map[types.UID]pendingRecord{}
		a.opened[b] = now
	}
	a.pending[b][rec.uid] = rec
	due := b.due()
	if gathered := a.opened[b].Add(auditFlushDelay); gathered.After(due) {
		due = gathered
	}
	return due
}

// take removes and returns the bucket's records, in UID order.
func (a *auditBatches) take(b auditBucket) []pendingRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	recs := make([]pendingRecord, 0, len(a.pending[b]))
	for _, rec := range a.pending[b] {
		recs = append(recs, rec)
	}
	delete(a.pending, b)
	delete(a.opened, b)
	slices.SortFunc(recs, func(x, y pendingRecord) int { return cmp.Compare(x.uid, y.uid) })
	return recs
}

// forget drops the record of a lease that was deleted before its batch was
// written (deleted directly, which the audit does not promise to record).
func (a *auditBatches) forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for b, recs := range a.pending {
		for uid, rec := range recs {
			if rec.key == key {
				delete(recs, uid)
			}
		}
		if len(recs) == 0 {
			delete(a.pending, b)
			delete(a.opened, b)
		}
	}
}

// flushAudit writes the records waiting in bucket b and remembers every
// lease whose record is written: those written now, and those a part of b
// held already. Records that could not be written wait for the next try.
func (r *Reconciler) flushAudit(ctx context.Context, log logr.Logger, b auditBucket) error {
	recs := r.auditBatches.take(b)
	if len(recs) == 0 {
		return nil
	}
	res, err := writeAuditBatch(ctx, r.Client, r.APIReader, b, recs)
	for _, h := range res.held {
		r.audited.Add(h.key, h.uid)
	}
	for _, rec := range recs {
		part, ok := res.written[rec.uid]
		if !ok {
			continue
		}
		r.audited.Add(rec.key, rec.uid)
		d := rec.data
		log.Info("Lease audit record", "record", part, "lease", d[auditrecord.KeyLease], "leaseUID", d[auditrecord.KeyLeaseUID],
			"pool", d[auditrecord.KeyPool], "identity", d[auditrecord.KeyIdentity], "policy", d[auditrecord.KeyPolicy], "method", d[auditrecord.KeyMethod],
			"member", d[auditrecord.KeyMember], "memberUID", d[auditrecord.KeyMemberUID], "boundAt", d[auditrecord.KeyBoundAt],
			"endedAt", d[auditrecord.KeyEndedAt], "endReason", d[auditrecord.KeyEndReason])
	}
	if err != nil {
		for _, rec := range recs {
			if !r.audited.Has(rec.key, rec.uid) {
				r.auditBatches.add(b, rec, time.Time{})
			}
		}
		return fmt.Errorf("writing the audit records of pool %s, leases ended at %s: %w",
			b.pool, time.Unix(b.second, 0).UTC().Format(time.RFC3339), err)
	}
	return nil
}

// batchResult is what writeAuditBatch did.
type batchResult struct {
	// written maps each record written now to the ConfigMap that holds it.
	written map[types.UID]string
	// held are the leases whose records the bucket's parts held already:
	// written before a restart or by another worker.
	held []heldRecord
}

type heldRecord struct {
	key types.NamespacedName
	uid types.UID
}

// writeAuditBatch writes the records of bucket b that no part of b holds
// yet. It reads b's parts in order (live: ConfigMaps are not cached), drops
// the records a part holds already, and creates the first missing part with
// the rest, spilling into further parts past auditPartBytes. So a record is
// written once however often it is offered, and a write that loses a race
// for a part name reads that part and goes on to the next.
func writeAuditBatch(ctx context.Context, c client.Writer, reader client.Reader, b auditBucket, recs []pendingRecord) (batchResult, error) {
	res := batchResult{written: map[types.UID]string{}}
	remaining := slices.Clone(recs)
	for part := 1; len(remaining) > 0; part++ {
		name := b.partName(part)
		cm := &corev1.ConfigMap{}
		err := reader.Get(ctx, types.NamespacedName{Namespace: b.namespace, Name: name}, cm)
		if err == nil {
			held, err := auditrecord.Decode(cm)
			if err != nil {
				continue // not a record kobe wrote; the next part is free
			}
			remaining = slices.DeleteFunc(remaining, func(rec pendingRecord) bool {
				if _, ok := held[string(rec.uid)]; ok {
					res.held = append(res.held, heldRecord{key: rec.key, uid: rec.uid})
					delete(held, string(rec.uid))
					return true
				}
				return false
			})
			// The part's other leases need no probe of their own later.
			for uid, rec := range held {
				if name := rec[auditrecord.KeyLease]; name != "" {
					res.held = append(res.held, heldRecord{key: types.NamespacedName{Namespace: b.namespace, Name: name}, uid: types.UID(uid)})
				}
			}
			continue
		}
		if !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("reading audit ConfigMap %s: %w", name, err)
		}
		cm, n, err := auditPart(b, name, remaining)
		if err != nil {
			return res, err
		}
		if err := c.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				part-- // someone wrote it meanwhile: read it
				continue
			}
			return res, fmt.Errorf("writing audit ConfigMap %s: %w", name, err)
		}
		for _, rec := range remaining[:n] {
			res.written[rec.uid] = name
		}
		remaining = remaining[n:]
	}
	return res, nil
}

// auditPart is the ConfigMap name of bucket b holding the first n of recs:
// as many as fit auditPartBytes, at least one.
func auditPart(b auditBucket, name string, recs []pendingRecord) (*corev1.ConfigMap, int, error) {
	data := map[string]string{}
	size := 0
	for _, rec := range recs {
		raw, err := json.Marshal(rec.data)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding the audit record of lease %s: %w", rec.key.Name, err)
		}
		if len(data) > 0 && size+len(raw) > auditPartBytes {
			break
		}
		data[string(rec.uid)] = string(raw)
		size += len(raw)
	}
	labels := map[string]string{auditrecord.Label: auditrecord.LabelValue}
	if len(validation.IsValidLabelValue(b.pool)) == 0 {
		labels[kobev1.LabelPool] = b.pool
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: b.namespace, Labels: labels,
			Annotations: map[string]string{auditrecord.EndedAtAnnotation: time.Unix(b.second, 0).UTC().Format(time.RFC3339)},
		},
		Immutable: ptr.To(true),
		Data:      data,
	}, len(data), nil
}
