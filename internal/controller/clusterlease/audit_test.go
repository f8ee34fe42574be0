//go:build integration

package clusterlease_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/auditrecord"
	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/controller/clusterlease"
	"github.com/kunobi-ninja/kobe/internal/index"
	"github.com/kunobi-ninja/kobe/internal/lease"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// startLeaseController runs a lease controller of its own on namespace ns,
// with a lease retention of retention, logging to log (when not nil).
func startLeaseController(t *testing.T, ns string, retention time.Duration, log *logLines) {
	t.Helper()
	env := shared.env
	opts := env.ManagerOptions(ns)
	if log != nil {
		opts.Logger = funcr.New(log.add, funcr.Options{})
	}
	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := index.Setup(t.Context(), mgr); err != nil {
		t.Fatal(err)
	}
	clk := clock.RealClock{}
	r := &clusterlease.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Binder:   &binding.Binder{Client: mgr.GetClient(), Reader: mgr.GetClient(), Clock: clk},
		Recorder: mgr.GetEventRecorder("test"), Clock: clk, Retention: retention,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
}

// logLines keeps what a logger wrote.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) matching(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// auditRecordOf finds the audit record of l and the ConfigMap holding it.
func auditRecordOf(t *testing.T, c client.Client, l *kobev1.ClusterLease) (map[string]string, *corev1.ConfigMap, error) {
	return auditrecord.Find(t.Context(), c, l.Namespace, l.UID)
}

// TestAuditRecordOutlivesTheLease (audit): a bound lease that
// ends leaves a record of who held which member, from when to when, under
// which policy; the lease is deleted after its retention and the record
// stays. A lease that never held a member leaves none.
func TestAuditRecordOutlivesTheLease(t *testing.T) {
	ns := shared.env.NewNamespace(t)
	log := &logLines{}
	startLeaseController(t, ns, 2*time.Second, log)
	h := &harness{t: t, c: shared.env.Client, ns: ns}
	h.pool("audited", 0)
	inst := h.member("audited")

	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns}, Spec: kobev1.ClusterLeaseSpec{
		Pool: "audited", TTL: &metav1.Duration{Duration: time.Hour},
		Requester: kobev1.Requester{Identity: "my-org/my-repo:refs/heads/main", Policy: "github-ci", Method: "oidc"}}}
	lease.StampQueuedAt(l, time.Now())
	h.must(h.c.Create(t.Context(), l))
	h.eventually(15*time.Second, "held to bind", phaseIs(h, "held", kobev1.LeaseBound, -1))
	queued := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "never-bound", Namespace: ns}, Spec: kobev1.ClusterLeaseSpec{Pool: "audited"}}
	lease.StampQueuedAt(queued, time.Now())
	h.must(h.c.Create(t.Context(), queued))
	h.eventually(15*time.Second, "never-bound to queue", phaseIs(h, "never-bound", kobev1.LeasePending, -1))

	// The holder releases both, as the HTTP API does.
	var bound *kobev1.ClusterLease
	for _, name := range []string{"held", "never-bound"} {
		cur := h.get(name)
		if name == "held" {
			bound = cur.DeepCopy()
		}
		lease.End(cur, kobev1.LeaseReleased, kobev1.ReasonReleased, "released by "+cur.Spec.Requester.Identity, time.Now())
		h.must(h.c.Status().Update(t.Context(), cur))
	}
	ended := h.get("held")

	h.eventually(20*time.Second, "both leases deleted after their retention", func() error {
		var ls kobev1.ClusterLeaseList
		if err := h.c.List(t.Context(), &ls, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(ls.Items) > 0 {
			return fmt.Errorf("%d leases left", len(ls.Items))
		}
		return nil
	})
	rec, cm, err := auditRecordOf(t, h.c, ended)
	if err != nil {
		t.Fatalf("the audit record of the deleted lease: %v", err)
	}
	want := map[string]string{
		auditrecord.KeyLease: "held", auditrecord.KeyLeaseUID: string(ended.UID), auditrecord.KeyPool: "audited",
		auditrecord.KeyIdentity: "my-org/my-repo:refs/heads/main", auditrecord.KeyPolicy: "github-ci", auditrecord.KeyMethod: "oidc",
		auditrecord.KeyMember: inst.Name, auditrecord.KeyMemberUID: string(inst.UID),
		auditrecord.KeyBoundAt:    bound.Status.BoundAt.UTC().Format(time.RFC3339),
		auditrecord.KeyExpiresAt:  bound.Status.ExpiresAt.UTC().Format(time.RFC3339),
		auditrecord.KeyEndedAt:    ended.Status.EndedAt.UTC().Format(time.RFC3339),
		auditrecord.KeyEndReason:  kobev1.ReasonReleased,
		auditrecord.KeyEndMessage: "released by my-org/my-repo:refs/heads/main",
		auditrecord.KeyExtensions: "0",
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("record %s = %q, want %q", k, rec[k], v)
		}
	}
	if len(rec) != len(want) {
		t.Errorf("record has %d keys, want %d: %v", len(rec), len(want), rec)
	}
	if cm.Name != clusterlease.AuditConfigMapName(ended) || len(cm.Data) != 1 {
		t.Errorf("record in ConfigMap %s holding %d records, want the lease's only in %s", cm.Name, len(cm.Data), clusterlease.AuditConfigMapName(ended))
	}
	if cm.Labels[auditrecord.Label] != auditrecord.LabelValue || cm.Labels[kobev1.LabelPool] != "audited" ||
		cm.Annotations[auditrecord.EndedAtAnnotation] != want[auditrecord.KeyEndedAt] {
		t.Errorf("record labels = %v, annotations %v", cm.Labels, cm.Annotations)
	}
	if len(cm.OwnerReferences) != 0 {
		t.Errorf("record has owners %v: it would be collected with them", cm.OwnerReferences)
	}
	// Nobody rewrites history: the record is immutable.
	cm.Data[string(ended.UID)] = `{"identity":"someone-else"}`
	if err := h.c.Update(t.Context(), cm); err == nil || !apierrors.IsInvalid(err) {
		t.Errorf("updating the record: %v, want it refused as immutable", err)
	}

	// The same, once, as a structured log line.
	lines := log.matching(`"Lease audit record"`)
	if len(lines) != 1 {
		t.Fatalf("%d audit log lines, want 1: %v", len(lines), lines)
	}
	for _, w := range []string{`"identity"="my-org/my-repo:refs/heads/main"`, `"policy"="github-ci"`, `"method"="oidc"`, `"member"="` + inst.Name + `"`,
		`"memberUID"="` + string(inst.UID) + `"`, `"endReason"="Released"`, `"boundAt"="` + want[auditrecord.KeyBoundAt] + `"`, `"endedAt"="` + want[auditrecord.KeyEndedAt] + `"`} {
		if !strings.Contains(lines[0], w) {
			t.Errorf("audit log line lacks %s: %s", w, lines[0])
		}
	}

	var records corev1.ConfigMapList
	h.must(h.c.List(t.Context(), &records, client.InNamespace(ns), client.MatchingLabels{auditrecord.Label: auditrecord.LabelValue}))
	if len(records.Items) != 1 {
		t.Errorf("%d audit records, want 1 (a lease that never held a member leaves none)", len(records.Items))
	}
}

// TestAuditRecordNamesTheMemberThatNamesTheLease: a lease released before
// its status copy named its member (the hand-out answered, then the caller
// released at once) is audited from the member's write-once leaseRef, the
// record of the bind; without it the record would be missing.
func TestAuditRecordNamesTheMemberThatNamesTheLease(t *testing.T) {
	ns := shared.env.NewNamespace(t)
	h := &harness{t: t, c: shared.env.Client, ns: ns}
	h.pool("quick", 0)
	inst := h.member("quick")
	h.lease("quick", "quick", time.Hour)
	l := h.get("quick")
	boundAt := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	inst.Spec.LeaseRef = &kobev1.LeaseBinding{Name: l.Name, UID: l.UID, BoundAt: &boundAt}
	inst.Labels[kobev1.LabelLease] = l.Name
	h.must(h.c.Update(t.Context(), inst))
	lease.End(l, kobev1.LeaseReleased, kobev1.ReasonReleased, "released", time.Now())
	h.must(h.c.Status().Update(t.Context(), l))
	if h.get("quick").Status.InstanceRef != nil {
		t.Fatal("the ended lease's status names a member; this test needs one that does not")
	}

	startLeaseController(t, ns, time.Hour, nil)
	var rec map[string]string
	h.eventually(20*time.Second, "the audit record", func() error {
		var err error
		rec, _, err = auditRecordOf(t, h.c, l)
		return err
	})
	if rec[auditrecord.KeyMember] != inst.Name || rec[auditrecord.KeyMemberUID] != string(inst.UID) ||
		rec[auditrecord.KeyBoundAt] != boundAt.UTC().Format(time.RFC3339) {
		t.Errorf("record = %v; want member %s (%s) bound at %s", rec, inst.Name, inst.UID, boundAt.UTC().Format(time.RFC3339))
	}
}

// TestAuditRecordIsWrittenOnce: a record that exists already (written
// before a restart, in its batch's ConfigMap) is left as it is, nothing is
// written again, and the lease is still deleted.
func TestAuditRecordIsWrittenOnce(t *testing.T) {
	ns := shared.env.NewNamespace(t)
	h := &harness{t: t, c: shared.env.Client, ns: ns}
	h.pool("once", 0)
	h.member("once")
	h.lease("once", "once", time.Hour)
	startLeaseController(t, ns, time.Second, nil)
	h.eventually(15*time.Second, "once to bind", phaseIs(h, "once", kobev1.LeaseBound, -1))
	cur := h.get("once")
	lease.End(cur, kobev1.LeaseExpired, kobev1.ReasonExpired, "expired", time.Now())
	earlier := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: clusterlease.AuditConfigMapName(cur), Namespace: ns,
		Labels: map[string]string{auditrecord.Label: auditrecord.LabelValue}}, Data: map[string]string{string(cur.UID): `{"written":"before"}`}}
	h.must(h.c.Create(t.Context(), earlier))
	h.must(h.c.Status().Update(t.Context(), cur))
	h.eventually(20*time.Second, "the lease deleted", func() error {
		err := h.c.Get(t.Context(), client.ObjectKeyFromObject(cur), &kobev1.ClusterLease{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
	rec, cm, err := auditRecordOf(t, h.c, cur)
	if err != nil || rec["written"] != "before" || len(rec) != 1 || cm.Name != earlier.Name {
		t.Errorf("the earlier record = %v, %v; want it untouched", rec, err)
	}
	if left := names(t, h.c, ns); len(slices.DeleteFunc(left, func(n string) bool { return !strings.HasPrefix(n, "kobe-audit-") })) != 1 {
		t.Errorf("audit ConfigMaps %v; want the earlier one only", left)
	}
}

// TestAuditRecordsAreBatched: the leases of a pool that end in the same
// second share one audit ConfigMap, one record each (a ConfigMap per lease
// was an API write in every twelve of a lease-and-release cycle).
func TestAuditRecordsAreBatched(t *testing.T) {
	ns := shared.env.NewNamespace(t)
	log := &logLines{}
	startLeaseController(t, ns, time.Hour, log)
	h := &harness{t: t, c: shared.env.Client, ns: ns}
	h.pool("batched", 0)
	const n = 5
	for i := range n {
		h.member("batched")
		h.lease(fmt.Sprintf("l%d", i), "batched", time.Hour)
	}
	for i := range n {
		h.eventually(15*time.Second, "the leases to bind", phaseIs(h, fmt.Sprintf("l%d", i), kobev1.LeaseBound, -1))
	}
	// The next second's start: the batch is due 1.5 s after it, so the five
	// ends (five status writes and their reconciles) have at least that
	// long to meet in it, however busy the machine; an end read from the
	// clock could fall at a second's last milliseconds and leave 0.5 s.
	endedAt := time.Now().Truncate(time.Second).Add(time.Second)
	var leases []*kobev1.ClusterLease
	for i := range n {
		cur := h.get(fmt.Sprintf("l%d", i))
		lease.End(cur, kobev1.LeaseReleased, kobev1.ReasonReleased, "released", endedAt)
		h.must(h.c.Status().Update(t.Context(), cur))
		leases = append(leases, cur)
	}
	h.eventually(20*time.Second, "every record", func() error {
		for _, l := range leases {
			if _, _, err := auditRecordOf(t, h.c, l); err != nil {
				return err
			}
		}
		return nil
	})
	var records corev1.ConfigMapList
	h.must(h.c.List(t.Context(), &records, client.InNamespace(ns), client.MatchingLabels{auditrecord.Label: auditrecord.LabelValue}))
	if len(records.Items) != 1 || len(records.Items[0].Data) != n {
		for _, cm := range records.Items {
			t.Logf("%s: %d records", cm.Name, len(cm.Data))
		}
		t.Fatalf("%d audit ConfigMaps; want one holding the %d leases' records", len(records.Items), n)
	}
	if lines := log.matching(`"Lease audit record"`); len(lines) != n {
		t.Errorf("%d audit log lines, want one per lease (%d)", len(lines), n)
	}
}

// TestAuditJanitor: records older than the audit retention (by endedAt)
// are deleted, newer ones and other ConfigMaps are not.
func TestAuditJanitor(t *testing.T) {
	ns := shared.env.NewNamespace(t)
	c := shared.env.Client
	now := time.Now()
	mk := func(name string, labelled bool, endedAgo time.Duration) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Data: map[string]string{auditrecord.KeyEndedAt: now.Add(-endedAgo).UTC().Format(time.RFC3339)}}
		if labelled {
			cm.Labels = map[string]string{auditrecord.Label: auditrecord.LabelValue}
		}
		if err := c.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	mk("kobe-audit-old", true, 31*24*time.Hour) // one record per ConfigMap, as before the batches
	mk("kobe-audit-new", true, 29*24*time.Hour)
	mk("not-an-audit-record", false, 365*24*time.Hour)
	batch := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kobe-audit-batch-old", Namespace: ns,
		Labels:      map[string]string{auditrecord.Label: auditrecord.LabelValue},
		Annotations: map[string]string{auditrecord.EndedAtAnnotation: now.Add(-31 * 24 * time.Hour).UTC().Format(time.RFC3339)}},
		Data: map[string]string{"uid-1": `{"lease":"a"}`, "uid-2": `{"lease":"b"}`}}
	if err := c.Create(t.Context(), batch); err != nil {
		t.Fatal(err)
	}

	// No retention given: the default (30 days), never "delete all".
	clk := testclock.NewFakePassiveClock(now)
	j := &clusterlease.AuditJanitor{Client: c, Reader: c, Namespace: ns, Clock: clk}
	if !j.NeedLeaderElection() {
		t.Error("the janitor must run on the leader only")
	}
	deleted, err := j.Sweep(t.Context())
	if err != nil || deleted != 2 {
		t.Fatalf("Sweep = %d, %v; want the two old ConfigMaps deleted", deleted, err)
	}
	left := strings.Join(names(t, c, ns), ",")
	if strings.Contains(left, "kobe-audit-old") || strings.Contains(left, "kobe-audit-batch-old") || !strings.Contains(left, "kobe-audit-new") || !strings.Contains(left, "not-an-audit-record") {
		t.Errorf("left %s; want only the old record gone", left)
	}
	// A month later the newer record is past its retention too; the
	// unlabelled ConfigMap never is a record.
	clk.SetTime(now.Add(31 * 24 * time.Hour))
	if deleted, err := j.Sweep(t.Context()); err != nil || deleted != 1 {
		t.Fatalf("Sweep a month later = %d, %v; want the newer record deleted", deleted, err)
	}
	if left := strings.Join(names(t, c, ns), ","); !strings.Contains(left, "not-an-audit-record") || strings.Contains(left, "kobe-audit") {
		t.Errorf("left %s", left)
	}
}

func names(t *testing.T, c client.Client, ns string) []string {
	var list corev1.ConfigMapList
	if err := c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, cm := range list.Items {
		out = append(out, cm.Name)
	}
	return out
}
