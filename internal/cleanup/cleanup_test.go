package cleanup_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/cleanup"
)

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		attempts int32
		want     time.Duration
	}{
		{1, 30 * time.Second}, {2, time.Minute}, {3, 2 * time.Minute}, {7, 32 * time.Minute},
		{8, time.Hour}, {9, time.Hour}, {1 << 30, time.Hour},
	} {
		if got := cleanup.Backoff(c.attempts); got != c.want {
			t.Errorf("Backoff(%d) = %s, want %s", c.attempts, got, c.want)
		}
	}
}

func TestRetryWait(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	next := metav1.NewTime(now.Add(time.Minute))
	inst := func(annotation string, st *kobev1.CleanupStatus) *kobev1.ClusterInstance {
		i := &kobev1.ClusterInstance{Status: kobev1.ClusterInstanceStatus{Cleanup: st}}
		if annotation != "" {
			i.Annotations = map[string]string{kobev1.AnnotationRetryCleanup: annotation}
		}
		return i
	}
	long := strings.Repeat("é", 40) // 80 bytes: cut at 64 without splitting a rune
	for _, c := range []struct {
		name    string
		inst    *kobev1.ClusterInstance
		wait    time.Duration
		request string
	}{
		{"first attempt", inst("", nil), 0, ""},
		{"waiting for the backoff", inst("", &kobev1.CleanupStatus{NextAttempt: &next}), time.Minute, ""},
		{"a new retry request", inst("t1", &kobev1.CleanupStatus{NextAttempt: &next, RetryRequest: "t0"}), 0, "t1"},
		{"a request already acted on", inst("t1", &kobev1.CleanupStatus{NextAttempt: &next, RetryRequest: "t1"}), time.Minute, ""},
		{"a long request is cut to valid UTF-8", inst(long, &kobev1.CleanupStatus{NextAttempt: &next}), 0, strings.Repeat("é", 32)},
		{"the long request acted on", inst(long, &kobev1.CleanupStatus{NextAttempt: &next, RetryRequest: strings.Repeat("é", 32)}), time.Minute, ""},
	} {
		wait, req := cleanup.RetryWait(c.inst, now)
		if wait != c.wait || req != c.request {
			t.Errorf("%s: RetryWait = %s, %q; want %s, %q", c.name, wait, req, c.wait, c.request)
		}
	}
}

func TestReceiptVerdict(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	withManifest := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", UID: "0123456789"},
		Spec: kobev1.ClusterInstanceSpec{PoolRef: kobev1.ObjectRef{Name: "p"}, LeaseRef: &kobev1.LeaseBinding{Name: "l", UID: "lu"}},
		Status: kobev1.ClusterInstanceStatus{CreationManifest: &kobev1.CreationManifest{RecordedAt: metav1.NewTime(now),
			Resources: []kobev1.ManifestResource{{Kind: "Path", Name: "/x"}}}}}
	noManifest := withManifest.DeepCopy()
	noManifest.Status.CreationManifest = nil
	absent := []backend.Check{{ManifestResource: kobev1.ManifestResource{Kind: "Path", Name: "/x"}, Absent: true}}
	present := []backend.Check{{ManifestResource: kobev1.ManifestResource{Kind: "Path", Name: "/x"}, Detail: "still exists"}}
	for _, c := range []struct {
		name     string
		inst     *kobev1.ClusterInstance
		a        cleanup.Attempt
		verified bool
		summary  string
	}{
		{"every check absent", withManifest, cleanup.Attempt{Gone: true, Checks: absent}, true, "all 1 resources proven absent"},
		{"a check present", withManifest, cleanup.Attempt{Gone: true, Checks: present}, false, "Path /x still exists"},
		{"the backend failed", withManifest, cleanup.Attempt{DeleteError: errors.New("EPERM"), Checks: absent}, false, "teardown failed: EPERM"},
		{"the backend is not done", withManifest, cleanup.Attempt{Checks: absent}, false, "the backend has not finished the teardown"},
		{"nothing could be checked", withManifest, cleanup.Attempt{Gone: true, VerifyError: errors.New("no /proc")}, false, "checks could not run: no /proc"},
		{"no checks at all", withManifest, cleanup.Attempt{Gone: true}, false, "not finished"},
		{"no manifest", noManifest, cleanup.Attempt{Gone: true, Checks: absent}, false, "no creation manifest"},
	} {
		r := cleanup.NewReceipt(c.inst, c.a)
		if r.Verified != c.verified || !strings.Contains(r.Summary(), c.summary) {
			t.Errorf("%s: verified %v summary %q; want %v and %q", c.name, r.Verified, r.Summary(), c.verified, c.summary)
		}
		if r.Lease != "l" || r.Pool != "p" {
			t.Errorf("%s: receipt does not name the lease and pool: %+v", c.name, r)
		}
	}
}

func TestReceiptName(t *testing.T) {
	inst := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 253), UID: "abcdef0123"}}
	if n := cleanup.ReceiptName(inst); len(n) > 253 || !strings.HasSuffix(n, "-abcdef01") || !strings.HasPrefix(n, "kobe-cleanup-a") {
		t.Errorf("ReceiptName = %q (%d bytes)", n, len(n))
	}
}

func TestCollector(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cm := func(name, keepUntil string, receipt bool) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{kobev1.AnnotationKeepUntil: keepUntil}}}
		if receipt {
			c.Labels = map[string]string{kobev1.LabelCleanupReceipt: "true"}
		}
		return c
	}
	objs := []client.Object{
		cm("expired", now.Add(-time.Second).Format(time.RFC3339), true),
		cm("kept", now.Add(time.Hour).Format(time.RFC3339), true),
		cm("unreadable", "tomorrow", true),
		cm("not-a-receipt", now.Add(-time.Hour).Format(time.RFC3339), false),
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	col := &cleanup.Collector{Client: c, Reader: c, Namespace: "ns", Clock: clocktesting.NewFakePassiveClock(now)}
	n, err := col.Collect(t.Context())
	if err != nil || n != 1 {
		t.Fatalf("Collect = %d, %v; want 1", n, err)
	}
	var left corev1.ConfigMapList
	if err := c.List(t.Context(), &left); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range left.Items {
		names = append(names, i.Name)
	}
	if strings.Join(names, ",") != "kept,not-a-receipt,unreadable" {
		t.Errorf("left %v, want kept, not-a-receipt, unreadable", names)
	}
}
