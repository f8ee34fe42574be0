package clusterlease

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auditrecord"
)

const testNS = "kobe-system"

func testBucket() auditBucket {
	return auditBucket{namespace: testNS, pool: "ci", second: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC).Unix()}
}

func rec(uid, msg string) pendingRecord {
	return pendingRecord{key: types.NamespacedName{Namespace: testNS, Name: "lease-" + uid}, uid: types.UID(uid),
		data: map[string]string{auditrecord.KeyLease: "lease-" + uid, auditrecord.KeyLeaseUID: uid, auditrecord.KeyPool: "ci", auditrecord.KeyEndMessage: msg}}
}

func newFake(objs ...client.Object) client.WithWatch {
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// stored reads every audit ConfigMap as name -> its records.
func stored(t *testing.T, c client.Reader) map[string]map[string]map[string]string {
	t.Helper()
	var cms corev1.ConfigMapList
	if err := c.List(t.Context(), &cms, client.MatchingLabels{auditrecord.Label: auditrecord.LabelValue}); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]map[string]string{}
	for i := range cms.Items {
		recs, err := auditrecord.Decode(&cms.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out[cms.Items[i].Name] = recs
	}
	return out
}

func TestAuditBucketNames(t *testing.T) {
	b := testBucket()
	if got, want := b.partName(1), fmt.Sprintf("kobe-audit-%d-", b.second); !strings.HasPrefix(got, want) {
		t.Errorf("part 1 = %s, want it to start %s", got, want)
	}
	if b.partName(2) != b.partName(1)+"-2" {
		t.Errorf("part 2 = %s", b.partName(2))
	}
	other := b
	other.pool = "nightly"
	if other.partName(1) == b.partName(1) {
		t.Error("two pools share a ConfigMap name")
	}
	// The same lease gives the same bucket before and after the status's
	// round trip through the API server (second precision).
	ended := metav1.NewTime(time.Unix(b.second, 987654321))
	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Namespace: testNS}, Spec: kobev1.ClusterLeaseSpec{Pool: "ci"},
		Status: kobev1.ClusterLeaseStatus{EndedAt: &ended}}
	if bucketOf(l) != b {
		t.Errorf("bucketOf = %+v, want %+v", bucketOf(l), b)
	}
	if !b.due().After(time.Unix(b.second+1, 0)) {
		t.Errorf("due %s: before the second is over", b.due())
	}
}

func TestWriteAuditBatch(t *testing.T) {
	b := testBucket()
	big := strings.Repeat("x", auditPartBytes/2)
	for _, tc := range []struct {
		name     string
		existing []client.Object
		recs     []pendingRecord
		// wantParts: part name suffix ("" for part 1) -> the UIDs it holds.
		wantParts map[string][]string
		wantNew   []string // UIDs written now
		wantHeld  []string // UIDs found written already
	}{{
		name:      "one ConfigMap for the whole batch",
		recs:      []pendingRecord{rec("a", ""), rec("b", ""), rec("c", "")},
		wantParts: map[string][]string{"": {"a", "b", "c"}},
		wantNew:   []string{"a", "b", "c"},
	}, {
		name:      "records written before a restart are not written again",
		existing:  []client.Object{part(b, 1, rec("a", ""))},
		recs:      []pendingRecord{rec("a", ""), rec("b", "")},
		wantParts: map[string][]string{"": {"a"}, "-2": {"b"}},
		wantNew:   []string{"b"},
		wantHeld:  []string{"a"},
	}, {
		name:      "a held record is known by the lease offering it, whatever it holds",
		existing:  []client.Object{part(b, 1, pendingRecord{uid: "a", data: map[string]string{"written": "before"}})},
		recs:      []pendingRecord{rec("a", "")},
		wantParts: map[string][]string{"": {"a"}},
		wantHeld:  []string{"a"},
	}, {
		name:      "all written already: no write",
		existing:  []client.Object{part(b, 1, rec("a", ""), rec("z", ""))},
		recs:      []pendingRecord{rec("a", "")},
		wantParts: map[string][]string{"": {"a", "z"}},
		wantHeld:  []string{"a", "z"},
	}, {
		name:      "a batch too big for one ConfigMap spills into the next",
		recs:      []pendingRecord{rec("a", big), rec("b", big), rec("c", "")},
		wantParts: map[string][]string{"": {"a"}, "-2": {"b", "c"}},
		wantNew:   []string{"a", "b", "c"},
	}, {
		name: "a ConfigMap at the name that holds no records is passed over",
		existing: []client.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: b.partName(1), Namespace: testNS},
			Data: map[string]string{"not": "json"}}},
		recs:      []pendingRecord{rec("a", "")},
		wantParts: map[string][]string{"-2": {"a"}},
		wantNew:   []string{"a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFake(tc.existing...)
			res, err := writeAuditBatch(t.Context(), c, c, b, tc.recs)
			if err != nil {
				t.Fatal(err)
			}
			checkParts(t, c, b, tc.wantParts)
			if got := slices.Sorted(maps.Keys(res.written)); !slices.Equal(uidStrings(got), tc.wantNew) {
				t.Errorf("written now %v, want %v", got, tc.wantNew)
			}
			var held []string
			for _, h := range res.held {
				held = append(held, string(h.uid))
				if h.key != (types.NamespacedName{Namespace: testNS, Name: "lease-" + string(h.uid)}) {
					t.Errorf("held record %s names lease %v", h.uid, h.key)
				}
			}
			slices.Sort(held)
			if !slices.Equal(held, tc.wantHeld) {
				t.Errorf("held %v, want %v", held, tc.wantHeld)
			}
		})
	}
}

// TestWriteAuditBatchRace: two writers of one bucket (two workers, or a
// replica that just lost leadership) both find a part missing; the one
// that loses the create reads the winner's part: the records it holds are
// not written twice, the others go to the next part.
func TestWriteAuditBatchRace(t *testing.T) {
	b := testBucket()
	inner := newFake()
	raced := false
	c := interceptor.NewClient(inner, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if !raced && obj.GetName() == b.partName(1) {
				raced = true
				if err := cl.Create(ctx, part(b, 1, rec("mine", ""), rec("other", ""))); err != nil {
					return err
				}
				return apierrors.NewAlreadyExists(corev1.Resource("configmaps"), obj.GetName())
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	res, err := writeAuditBatch(t.Context(), c, c, b, []pendingRecord{rec("mine", ""), rec("late", "")})
	if err != nil {
		t.Fatal(err)
	}
	checkParts(t, inner, b, map[string][]string{"": {"mine", "other"}, "-2": {"late"}})
	if len(res.written) != 1 || res.written["late"] != b.partName(2) {
		t.Errorf("written %v, want only late, in part 2", res.written)
	}
}

// TestWriteAuditBatchFailure: a refused write reports the error and
// writes nothing, so the records wait for the next try.
func TestWriteAuditBatchFailure(t *testing.T) {
	b := testBucket()
	c := interceptor.NewClient(newFake(), interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewForbidden(corev1.Resource("configmaps"), "x", fmt.Errorf("no RBAC"))
		},
	})
	res, err := writeAuditBatch(t.Context(), c, c, b, []pendingRecord{rec("a", "")})
	if !apierrors.IsForbidden(err) || len(res.written) != 0 {
		t.Errorf("= %v, %v; want the refusal and nothing written", res.written, err)
	}
}

func TestAuditBatchesTakeAndForget(t *testing.T) {
	var a auditBatches
	b, other := testBucket(), testBucket()
	other.second++
	// On time, a batch is due a moment after its second; a batch whose
	// first record came late (a lease controller running behind) gathers
	// for auditFlushDelay from then.
	onTime := time.Unix(b.second, 200e6)
	if due := a.add(b, rec("b", ""), onTime); !due.Equal(b.due()) {
		t.Errorf("due %s, want %s", due, b.due())
	}
	if due := a.add(b, rec("a", ""), b.due().Add(time.Minute)); !due.Equal(b.due()) {
		t.Errorf("a batch opened on time: due %s, want %s", due, b.due())
	}
	a.add(b, rec("a", "again"), onTime) // the same lease offered twice is one record
	late := b.due().Add(3 * time.Second)
	if due := a.add(other, rec("c", ""), late); !due.Equal(late.Add(auditFlushDelay)) {
		t.Errorf("a batch opened late: due %s, want %s", due, late.Add(auditFlushDelay))
	}
	a.forget(types.NamespacedName{Namespace: testNS, Name: "lease-c"})
	got := a.take(b)
	if len(got) != 2 || got[0].uid != "a" || got[1].uid != "b" {
		t.Errorf("take = %v, want a and b in UID order", got)
	}
	if len(a.take(b)) != 0 || len(a.take(other)) != 0 || len(a.pending) != 0 || len(a.opened) != 0 {
		t.Errorf("left %v", a.pending)
	}
}

func TestAuditRecordsReadsBothShapes(t *testing.T) {
	legacy := &corev1.ConfigMap{Data: map[string]string{auditrecord.KeyLeaseUID: "u1", auditrecord.KeyLease: "l1"}}
	recs, err := auditrecord.Decode(legacy)
	if err != nil || len(recs) != 1 || recs["u1"][auditrecord.KeyLease] != "l1" {
		t.Errorf("legacy record = %v, %v", recs, err)
	}
	cm, _, err := auditPart(testBucket(), "x", []pendingRecord{rec("u2", "m")})
	if err != nil {
		t.Fatal(err)
	}
	recs, err = auditrecord.Decode(cm)
	if err != nil || recs["u2"][auditrecord.KeyEndMessage] != "m" {
		t.Errorf("batched record = %v, %v", recs, err)
	}
	if cm.Immutable == nil || !*cm.Immutable || cm.Labels[kobev1.LabelPool] != "ci" ||
		cm.Annotations[auditrecord.EndedAtAnnotation] != "2026-12-04T10:00:00Z" {
		t.Errorf("part = %+v", cm.ObjectMeta)
	}
}

func part(b auditBucket, n int, recs ...pendingRecord) *corev1.ConfigMap {
	cm, _, err := auditPart(b, b.partName(n), recs)
	if err != nil {
		panic(err)
	}
	return cm
}

func checkParts(t *testing.T, c client.Reader, b auditBucket, want map[string][]string) {
	t.Helper()
	got := stored(t, c)
	wantByName := map[string][]string{}
	for suffix, uids := range want {
		wantByName[b.partName(1)+suffix] = uids
	}
	for name, uids := range wantByName {
		if have := slices.Sorted(maps.Keys(got[name])); !slices.Equal(have, uids) {
			t.Errorf("ConfigMap %s holds %v, want %v", name, have, uids)
		}
	}
	for name := range got {
		if _, ok := wantByName[name]; !ok {
			t.Errorf("unexpected ConfigMap %s: %v", name, slices.Sorted(maps.Keys(got[name])))
		}
	}
}

func uidStrings(uids []types.UID) []string {
	out := []string{}
	for _, u := range uids {
		out = append(out, string(u))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
