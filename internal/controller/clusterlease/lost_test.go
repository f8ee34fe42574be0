//go:build integration

package clusterlease_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
)

// TestLeaseEndsWhenItsMemberIsLost (InstanceLost): a Bound lease
// whose member dies ends at once with reason InstanceLost, whichever way
// the death shows: the instance controller recycles the member (its
// backend reported it Failed or gone), someone deletes it (it lingers
// behind its finalizer while it is destroyed), it is quarantined, or its
// object is gone altogether. A lease whose member is well is left alone.
func TestLeaseEndsWhenItsMemberIsLost(t *testing.T) {
	h := start(t)
	h.pool("lost", 0)
	cases := []struct {
		name string
		kill func(inst *kobev1.ClusterInstance)
		// says is what the lease's Ended condition must say.
		says string
	}{
		{"recycled by the instance controller", func(inst *kobev1.ClusterInstance) {
			inst.Status.Phase = kobev1.InstanceRecycling
			meta.SetStatusCondition(&inst.Status.Conditions, metav1.Condition{Type: kobev1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: kobev1.ReasonInstanceLost, Message: "the backend reports the member failed while leased: kube-apiserver exited"})
			h.must(h.c.Status().Update(h.t.Context(), inst))
		}, "is Recycling: the backend reports the member failed while leased: kube-apiserver exited"},
		{"quarantined", func(inst *kobev1.ClusterInstance) {
			inst.Status.Phase = kobev1.InstanceQuarantined
			h.must(h.c.Status().Update(h.t.Context(), inst))
		}, "is Quarantined"},
		{"deleted, behind a finalizer", func(inst *kobev1.ClusterInstance) {
			inst.Finalizers = []string{"test.kobe.kunobi.ninja/hold"}
			h.must(h.c.Update(h.t.Context(), inst))
			h.must(h.c.Delete(h.t.Context(), inst))
		}, "is being deleted"},
		{"gone", func(inst *kobev1.ClusterInstance) {
			h.must(h.c.Delete(h.t.Context(), inst))
		}, "is gone"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.t = t
			inst := h.member("lost")
			name := fmt.Sprintf("lost-%d", i)
			h.lease(name, "lost", time.Hour)
			h.eventually(15*time.Second, name+" to bind", phaseIs(h, name, kobev1.LeaseBound, -1))
			healthy := fmt.Sprintf("healthy-%d", i)
			h.member("lost")
			h.lease(healthy, "lost", time.Hour)
			h.eventually(15*time.Second, healthy+" to bind", phaseIs(h, healthy, kobev1.LeaseBound, -1))

			h.must(h.c.Get(t.Context(), client.ObjectKeyFromObject(inst), inst))
			if inst.Spec.LeaseRef == nil || inst.Spec.LeaseRef.Name != name {
				t.Fatalf("member %s is bound to %+v, want %s", inst.Name, inst.Spec.LeaseRef, name)
			}
			start := time.Now()
			tc.kill(inst)
			h.eventually(15*time.Second, name+" to end", phaseIs(h, name, kobev1.LeaseExpired, -1))
			t.Logf("lease ended %s after its member was lost", time.Since(start).Round(10*time.Millisecond))
			l := h.get(name)
			c := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionEnded)
			if c == nil || c.Reason != kobev1.ReasonInstanceLost || !strings.Contains(c.Message, tc.says) {
				t.Errorf("Ended condition = %+v, want reason InstanceLost saying %q", c, tc.says)
			}
			if l.Status.InstanceRef == nil || l.Status.InstanceRef.Name != inst.Name {
				t.Errorf("the ended lease names member %+v, want %s", l.Status.InstanceRef, inst.Name)
			}
			if b := meta.FindStatusCondition(l.Status.Conditions, kobev1.ConditionBound); b == nil || b.Status != metav1.ConditionFalse {
				t.Errorf("Bound condition = %+v, want False", b)
			}
			if got := h.get(healthy); got.Status.Phase != kobev1.LeaseBound {
				t.Errorf("the lease of a healthy member is %s, want Bound", got.Status.Phase)
			}
			if len(inst.Finalizers) > 0 {
				h.must(h.c.Get(t.Context(), client.ObjectKeyFromObject(inst), inst))
				inst.Finalizers = nil
				h.must(h.c.Update(t.Context(), inst))
			}
		})
	}
}
