// Package auditrecord is the shape of kobe's audit records in the host
// cluster (docs/audit.md): who held which member, from when to when, under
// which policy. The lease controller writes them (its audit step batches
// the leases of a pool that ended in the same second into one ConfigMap);
// kobe admin audit, the retention janitor and the tests read them.
package auditrecord

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// Label marks the ConfigMaps that hold audit records; its value is
	// LabelValue.
	Label      = "kobe.kunobi.ninja/audit"
	LabelValue = "lease"
	// EndedAtAnnotation is the second (RFC 3339) in which every lease of an
	// audit ConfigMap ended: the retention janitor's clock.
	EndedAtAnnotation = "kobe.kunobi.ninja/ended-at"
)

// Keys of an audit record.
const (
	KeyLease      = "lease"
	KeyLeaseUID   = "leaseUID"
	KeyPool       = "pool"
	KeyIdentity   = "identity"
	KeyPolicy     = "policy"
	KeyMethod     = "method"
	KeyMember     = "member"
	KeyMemberUID  = "memberUID"
	KeyBoundAt    = "boundAt"
	KeyExpiresAt  = "expiresAt"
	KeyEndedAt    = "endedAt"
	KeyEndReason  = "endReason"
	KeyEndMessage = "endMessage"
	KeyExtensions = "extensions"
)

// Decode reads the records an audit ConfigMap holds, by lease UID: one
// data key per lease, its record as a JSON object. A ConfigMap written
// before records were batched (kobe-audit-<lease UID>, the record's keys as
// its data) reads as the one record it is.
func Decode(cm *corev1.ConfigMap) (map[string]map[string]string, error) {
	if uid, ok := cm.Data[KeyLeaseUID]; ok {
		return map[string]map[string]string{uid: cm.Data}, nil
	}
	out := make(map[string]map[string]string, len(cm.Data))
	for uid, raw := range cm.Data {
		rec := map[string]string{}
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			return nil, fmt.Errorf("audit ConfigMap %s: the record of lease %s: %w", cm.Name, uid, err)
		}
		out[uid] = rec
	}
	return out, nil
}

// List reads every audit ConfigMap of namespace.
func List(ctx context.Context, r client.Reader, namespace string) ([]corev1.ConfigMap, error) {
	var cms corev1.ConfigMapList
	if err := r.List(ctx, &cms, client.InNamespace(namespace), client.MatchingLabels{Label: LabelValue}); err != nil {
		return nil, fmt.Errorf("listing audit records: %w", err)
	}
	return cms.Items, nil
}

// Find finds the record of the lease with UID uid among the audit
// ConfigMaps of namespace, and the ConfigMap that holds it.
// apierrors.IsNotFound tells a lease with no record (yet).
func Find(ctx context.Context, r client.Reader, namespace string, uid types.UID) (map[string]string, *corev1.ConfigMap, error) {
	cms, err := List(ctx, r, namespace)
	if err != nil {
		return nil, nil, err
	}
	for i := range cms {
		recs, err := Decode(&cms[i])
		if err != nil {
			return nil, nil, err
		}
		if rec, ok := recs[string(uid)]; ok {
			return rec, &cms[i], nil
		}
	}
	return nil, nil, apierrors.NewNotFound(corev1.Resource("configmaps"), "audit record of lease "+string(uid))
}
