package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kunobi-ninja/kobe/internal/auditrecord"
)

// TestAdminAudit: kobe admin audit finds a lease's record by any of the
// names a person has at hand, in batched ConfigMaps and in the per-lease
// ones written before the batches, oldest first; nothing found is an error
// that says what has a record.
func TestAdminAudit(t *testing.T) {
	rec := func(uid, lease, member, ended string) string {
		raw, _ := json.Marshal(map[string]string{auditrecord.KeyLeaseUID: uid, auditrecord.KeyLease: lease, auditrecord.KeyPool: "ci",
			auditrecord.KeyMember: member, auditrecord.KeyIdentity: "my-org/my-repo:refs/heads/main", auditrecord.KeyEndedAt: ended})
		return string(raw)
	}
	labels := map[string]string{auditrecord.Label: auditrecord.LabelValue}
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kobe-audit-1-aa", Namespace: "kobe", Labels: labels}, Data: map[string]string{
			"u2": rec("u2", "lease-b", "pool-ci-2", "2026-12-04T10:00:02Z"),
			"u3": rec("u3", "lease-c", "pool-ci-3", "2026-12-04T10:00:02Z"),
		}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kobe-audit-u1", Namespace: "kobe", Labels: labels}, Data: map[string]string{
			auditrecord.KeyLeaseUID: "u1", auditrecord.KeyLease: "lease-a", auditrecord.KeyPool: "ci", auditrecord.KeyMember: "pool-ci-1",
			auditrecord.KeyEndedAt: "2026-12-04T09:00:00Z",
		}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "other", Labels: labels}, Data: map[string]string{
			"u9": rec("u9", "lease-z", "pool-ci-9", "2026-12-04T10:00:00Z"),
		}},
	}
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	run := func(name string) ([]map[string]string, error) {
		var out, errOut bytes.Buffer
		o := &auditOptions{AdminOptions: &AdminOptions{streams: IOStreams{Out: &out, ErrOut: &errOut},
			newClient: func(*AdminOptions) (client.Client, string, error) { return c, "kobe", nil }}, Name: name}
		if err := o.Run(t.Context()); err != nil {
			return nil, err
		}
		var recs []map[string]string
		if err := json.Unmarshal(out.Bytes(), &recs); err != nil {
			t.Fatalf("output %q: %v", out.String(), err)
		}
		return recs, nil
	}
	for _, tc := range []struct {
		name string
		want []string // lease UIDs, in order
	}{
		{"lease-b", []string{"u2"}},
		{"u3", []string{"u3"}},
		{"pool-ci-1", []string{"u1"}},
		{"ci", []string{"u1", "u2", "u3"}},
		{"my-org/my-repo:refs/heads/main", []string{"u2", "u3"}},
	} {
		recs, err := run(tc.name)
		if err != nil {
			t.Errorf("audit %s: %v", tc.name, err)
			continue
		}
		var got []string
		for _, r := range recs {
			got = append(got, r[auditrecord.KeyLeaseUID])
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("audit %s = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Another namespace's records are not this installation's.
	if _, err := run("lease-z"); err == nil || !strings.Contains(err.Error(), `no audit record names "lease-z" in namespace "kobe"`) {
		t.Errorf("audit of another namespace's lease: %v", err)
	}
}
