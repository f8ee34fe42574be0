package cleanup

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
)

// ReceiptKey is the key of the receipt's JSON in its ConfigMap.
const ReceiptKey = "receipt.json"

// DefaultRetention is how long receipts are kept: 30 days, well past any
// lease's retention, so that an audit after the fact still finds them.
const DefaultRetention = 30 * 24 * time.Hour

// Receipt is the proof (or the failed proof) of one member's teardown.
type Receipt struct {
	Namespace string    `json:"namespace"`
	Member    string    `json:"member"`
	MemberUID types.UID `json:"memberUID"`
	Pool      string    `json:"pool"`
	Lease     string    `json:"lease,omitempty"`
	LeaseUID  types.UID `json:"leaseUID,omitempty"`
	Backend   string    `json:"backend"`
	// Host is the host a local member ran on (its kobe.kunobi.ninja/host).
	Host string `json:"host,omitempty"`
	// ManifestRecordedAt is when the creation manifest was recorded; nil
	// when the member has none (nothing can then be proven).
	ManifestRecordedAt *time.Time `json:"manifestRecordedAt,omitempty"`
	// Attempt numbers the teardown attempts, from 1.
	Attempt   int32     `json:"attempt"`
	CheckedAt time.Time `json:"checkedAt"`
	// Verified is true when every check proved its resource absent.
	Verified bool `json:"verified"`
	// DeleteError is what the backend's teardown reported, if it failed.
	DeleteError string `json:"deleteError,omitempty"`
	// VerifyError is why nothing could be checked, if so.
	VerifyError string          `json:"verifyError,omitempty"`
	Checks      []backend.Check `json:"checks"`
}

// Attempt is the outcome of one teardown attempt, as the controller saw it.
type Attempt struct {
	// Gone is what the backend's Delete reported.
	Gone        bool
	DeleteError error
	VerifyError error
	Checks      []backend.Check
	Number      int32
	Now         time.Time
}

// NewReceipt writes up an attempt on inst. It is Verified only when the
// member had a creation manifest, the backend reported it gone, every check
// ran and every check proved absence: anything less is no proof.
func NewReceipt(inst *kobev1.ClusterInstance, a Attempt) Receipt {
	r := Receipt{
		Namespace: inst.Namespace, Member: inst.Name, MemberUID: inst.UID, Pool: inst.Spec.PoolRef.Name,
		Backend: string(inst.Spec.Backend.Type), Host: inst.Annotations[kobev1.AnnotationHost],
		Attempt: a.Number, CheckedAt: a.Now.UTC(), Checks: a.Checks,
	}
	if ref := inst.Spec.LeaseRef; ref != nil {
		r.Lease, r.LeaseUID = ref.Name, ref.UID
	}
	if m := inst.Status.CreationManifest; m != nil {
		t := m.RecordedAt.UTC()
		r.ManifestRecordedAt = &t
	}
	if a.DeleteError != nil {
		r.DeleteError = a.DeleteError.Error()
	}
	if a.VerifyError != nil {
		r.VerifyError = a.VerifyError.Error()
	}
	if r.Checks == nil {
		r.Checks = []backend.Check{}
	}
	r.Verified = r.ManifestRecordedAt != nil && a.Gone && a.DeleteError == nil && a.VerifyError == nil &&
		len(r.Checks) > 0 && len(Unproven(r.Checks)) == 0
	return r
}

// Unproven returns the checks that did not prove their resource absent.
func Unproven(checks []backend.Check) []backend.Check {
	var out []backend.Check
	for _, c := range checks {
		if !c.Absent {
			out = append(out, c)
		}
	}
	return out
}

// Summary says in one line why a receipt is not a proof.
func (r Receipt) Summary() string {
	var parts []string
	if r.ManifestRecordedAt == nil {
		parts = append(parts, "no creation manifest was recorded for the member")
	}
	if r.DeleteError != "" {
		parts = append(parts, "teardown failed: "+r.DeleteError)
	}
	if r.VerifyError != "" {
		parts = append(parts, "checks could not run: "+r.VerifyError)
	}
	for _, c := range Unproven(r.Checks) {
		parts = append(parts, fmt.Sprintf("%s %s %s", c.Kind, c.Name, c.Detail))
	}
	if len(parts) == 0 && !r.Verified {
		parts = append(parts, "the backend has not finished the teardown")
	}
	if len(parts) == 0 {
		return fmt.Sprintf("all %d resources proven absent", len(r.Checks))
	}
	return strings.Join(parts, "; ")
}

// ReceiptName is the name of the ConfigMap holding the receipt of inst:
// the member's name and the start of its UID (a name may come back later).
func ReceiptName(inst *kobev1.ClusterInstance) string {
	uid := string(inst.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	name := inst.Name
	if max := 253 - len("kobe-cleanup-") - 1 - len(uid); len(name) > max {
		name = name[:max]
	}
	return "kobe-cleanup-" + name + "-" + uid
}

// ConfigMap renders receipt r of inst, kept until keepUntil.
func ConfigMap(inst *kobev1.ClusterInstance, r Receipt, keepUntil time.Time) (*corev1.ConfigMap, error) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the cleanup receipt of %s: %w", inst.Name, err)
	}
	labels := map[string]string{kobev1.LabelCleanupReceipt: "true", kobev1.LabelMemberUID: string(inst.UID)}
	if len(inst.Spec.PoolRef.Name) <= 63 {
		labels[kobev1.LabelPool] = inst.Spec.PoolRef.Name
	}
	if ref := inst.Spec.LeaseRef; ref != nil && len(ref.Name) <= 63 {
		labels[kobev1.LabelLease] = ref.Name
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: inst.Namespace, Name: ReceiptName(inst), Labels: labels,
			Annotations: map[string]string{kobev1.AnnotationKeepUntil: keepUntil.UTC().Format(time.RFC3339)},
		},
		Data: map[string]string{ReceiptKey: string(data)},
	}, nil
}

// Decode reads the receipt out of its ConfigMap.
func Decode(cm *corev1.ConfigMap) (Receipt, error) {
	var r Receipt
	raw, ok := cm.Data[ReceiptKey]
	if !ok {
		return r, fmt.Errorf("ConfigMap %s holds no %s", cm.Name, ReceiptKey)
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return r, fmt.Errorf("decoding the receipt in ConfigMap %s: %w", cm.Name, err)
	}
	return r, nil
}
