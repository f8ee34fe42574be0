//go:build integration

package clusterinstance

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/backend"
	"github.com/kunobi-ninja/kobe/internal/cleanup"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// verifyingFake is the fake backend with a creation manifest of one path
// per member; a member named in survivors keeps it "alive" after Delete.
type verifyingFake struct {
	*fakeBackend
	mu        sync.Mutex
	survivors map[string]bool
}

func (v *verifyingFake) keepAlive(name string, alive bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.survivors[name] = alive
}

func (v *verifyingFake) Manifest(_ context.Context, m backend.Member) ([]kobev1.ManifestResource, error) {
	return []kobev1.ManifestResource{{Kind: "Path", Name: "/fake/" + m.Name}}, nil
}

func (v *verifyingFake) Verify(_ context.Context, m backend.Member, manifest []kobev1.ManifestResource) ([]backend.Check, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]backend.Check, 0, len(manifest))
	for _, r := range manifest {
		c := backend.Check{ManifestResource: r, Absent: true, Detail: "does not exist"}
		if v.survivors[m.Name] {
			c.Absent, c.Detail = false, "still exists"
		}
		out = append(out, c)
	}
	return out, nil
}

// TestVerifiedDestroyQuarantine: a VerifiedDestroy member whose teardown
// cannot be proven is Quarantined (with a receipt, its lease Quarantined
// too) and stays so; once the obstacle is gone, the retry annotation frees
// it at once, long before the backoff, with a receipt proving every check.
func TestVerifiedDestroyQuarantine(t *testing.T) {
	var vf *verifyingFake
	h := startHarnessWith(t, func(f *fakeBackend) backend.Backend {
		vf = &verifyingFake{fakeBackend: f, survivors: map[string]bool{}}
		return vf
	})
	ns := h.namespace(t)
	_, m := h.poolAndMember(t, ns, nil)
	ready := h.waitPhase(t, m, kobev1.InstanceReady, 20*time.Second)
	if cm := ready.Status.CreationManifest; cm == nil || len(cm.Resources) != 1 || cm.Resources[0].Name != "/fake/"+m.Name {
		t.Fatalf("creation manifest %+v, want the fake's one path", ready.Status.CreationManifest)
	}

	// A forged manifest is refused once one is recorded.
	forged := ready.DeepCopy()
	forged.Status.CreationManifest.Resources[0].Name = "/elsewhere"
	if err := h.c.Status().Update(t.Context(), forged); err == nil || !strings.Contains(err.Error(), "creationManifest is immutable") {
		t.Fatalf("rewriting the creation manifest: %v, want refused as immutable", err)
	}

	l := &kobev1.ClusterLease{ObjectMeta: metav1.ObjectMeta{Name: "verified", Namespace: ns},
		Spec: kobev1.ClusterLeaseSpec{Pool: m.Spec.PoolRef.Name, CleanupMode: kobev1.CleanupVerifiedDestroy}}
	if err := h.c.Create(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	h.claim(t, m, l)
	h.waitPhase(t, m, kobev1.InstanceLeased, 10*time.Second)
	vf.keepAlive(m.Name, true)
	l.Status.Phase = kobev1.LeaseReleased
	if err := h.c.Status().Update(t.Context(), l); err != nil {
		t.Fatal(err)
	}

	q := h.waitPhase(t, m, kobev1.InstanceQuarantined, 20*time.Second)
	st := q.Status.Cleanup
	if st == nil || st.Verified || st.Attempts != 1 || st.Receipt == "" || st.NextAttempt == nil || !strings.Contains(st.Message, "still exists") {
		t.Fatalf("cleanup status %+v, want one failed attempt with a receipt naming what survived", st)
	}
	if wait := st.NextAttempt.Sub(st.LastAttempt.Time); wait != cleanup.BaseBackoff {
		t.Errorf("next attempt in %s, want the first backoff step %s", wait, cleanup.BaseBackoff)
	}
	rec := receipt(t, h, ns, st.Receipt)
	if rec.Verified || rec.Lease != "verified" || rec.MemberUID != m.UID {
		t.Errorf("receipt %+v: want unverified, naming the lease and the member", rec)
	}
	kinds := map[string]bool{}
	for _, c := range rec.Checks {
		kinds[c.Kind] = c.Absent
	}
	if absent, ok := kinds["Path"]; !ok || absent {
		t.Errorf("receipt checks %+v: the surviving path must be reported present", rec.Checks)
	}
	if !kinds[checkAccessMaterial] || !kinds[checkLeaseRoute] {
		t.Errorf("receipt checks %+v: the access Secret and the lease route must be proven gone", rec.Checks)
	}
	h.waitEvent(t, ns, m.Name, kobev1.ReasonCleanupUnproven)
	testenv.Eventually(t, 10*time.Second, "lease Quarantined with the receipt", func() error {
		got := &kobev1.ClusterLease{}
		if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(l), got); err != nil {
			return err
		}
		return holds(got.Status.Phase == kobev1.LeaseQuarantined && got.Status.CleanupReceipt != nil && got.Status.CleanupReceipt.Name == st.Receipt,
			fmt.Sprintf("phase %s receipt %+v", got.Status.Phase, got.Status.CleanupReceipt))
	})

	// It stays Quarantined: nothing retries before the backoff.
	testenv.Consistently(t, 2*time.Second, "the Quarantined member to stay put before its backoff", func() error {
		got, ok := h.get(t, m)
		return holds(ok && got.Status.Phase == kobev1.InstanceQuarantined && got.Status.Cleanup != nil && got.Status.Cleanup.Attempts == 1,
			fmt.Sprintf("a Quarantined member moved before its backoff: %+v", got))
	})

	vf.keepAlive(m.Name, false)
	retried := time.Now()
	patch := client.MergeFrom(q.DeepCopy())
	q.Annotations = map[string]string{kobev1.AnnotationRetryCleanup: "now"}
	if err := h.c.Patch(t.Context(), q, patch); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, m, 10*time.Second)
	if d := time.Since(retried); d >= cleanup.BaseBackoff {
		t.Errorf("the retry took %s: the annotation must not wait for the backoff", d)
	}
	rec = receipt(t, h, ns, st.Receipt)
	if !rec.Verified || rec.Attempt != 2 {
		t.Errorf("receipt after the retry: verified %v attempt %d, want a proof at attempt 2: %+v", rec.Verified, rec.Attempt, rec)
	}
	for _, c := range rec.Checks {
		if !c.Absent {
			t.Errorf("verified receipt holds an unproven check: %+v", c)
		}
	}
}

func receipt(t *testing.T, h *harness, ns, name string) cleanup.Receipt {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := h.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		t.Fatalf("reading receipt %s: %v", name, err)
	}
	if cm.Labels[kobev1.LabelCleanupReceipt] != "true" || cm.Annotations[kobev1.AnnotationKeepUntil] == "" {
		t.Errorf("receipt %s lacks its label or keep-until: %v %v", name, cm.Labels, cm.Annotations)
	}
	r, err := cleanup.Decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
