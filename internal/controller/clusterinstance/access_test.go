//go:build integration

package clusterinstance

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess"
	"github.com/kunobi-ninja/kobe/internal/credentials/memberaccess/accesstest"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// setStatus writes change to the live member's status, retrying on
// conflicts with the controller.
func (h *harness) setStatus(t *testing.T, m *kobev1.ClusterInstance, change func(*kobev1.ClusterInstance)) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "writing the status of "+m.Name, func() error {
		cur, ok := h.get(t, m)
		if !ok {
			return holds(false, "gone")
		}
		change(cur)
		return h.c.Status().Update(t.Context(), cur)
	})
}

func TestAccessMaterial(t *testing.T) {
	h := startHarness(t)

	t.Run("a Ready member whose material does not open with the operator's key is recycled", func(t *testing.T) {
		ns := h.namespace(t)
		p, m := h.poolAndMember(t, ns, nil)
		got := h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		// As after the key Secret was replaced: sealed under another key.
		other, err := memberaccess.NewSealer(bytes.Repeat([]byte{1}, memberaccess.KeySize))
		if err != nil {
			t.Fatal(err)
		}
		a, err := accesstest.Sealer().Full(got)
		if err != nil {
			t.Fatal(err)
		}
		h.setStatus(t, m, func(cur *kobev1.ClusterInstance) {
			if err := other.Publish(cur, a); err != nil {
				t.Fatal(err)
			}
		})
		h.waitGone(t, m, 15*time.Second)
		h.waitEvent(t, ns, m.Name, kobev1.ReasonAccessUnreadable)
		if f := h.failures(t, p); f != 0 {
			t.Errorf("pool failures = %d; a member lost to a key change is not a failure to build", f)
		}
	})

	t.Run("a member an older operator built is moved from its access Secret into its status", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		got := h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		a, err := accesstest.Sealer().Full(got)
		if err != nil {
			t.Fatal(err)
		}
		legacy := memberaccess.LegacySecret(got, a)
		if err := h.c.Create(t.Context(), legacy); err != nil {
			t.Fatal(err)
		}
		h.setStatus(t, m, func(cur *kobev1.ClusterInstance) {
			cur.Status.Access, cur.Status.AccessSecretRef = nil, &kobev1.LocalRef{Name: legacy.Name}
		})
		testenv.Eventually(t, 15*time.Second, "the material moved and the Secret deleted", func() error {
			cur, ok := h.get(t, m)
			if !ok {
				return holds(false, "gone")
			}
			if cur.Status.Access == nil || cur.Status.AccessSecretRef != nil {
				return holds(false, "not moved yet")
			}
			err := h.c.Get(t.Context(), client.ObjectKeyFromObject(legacy), &corev1.Secret{})
			return holds(apierrors.IsNotFound(err), "the Secret is still there")
		})
		cur, _ := h.get(t, m)
		moved, err := accesstest.Sealer().Full(cur)
		if err != nil || !bytes.Equal(moved.ClientCAKey, a.ClientCAKey) || !bytes.Equal(moved.AdminKubeconfig, a.AdminKubeconfig) {
			t.Fatalf("moved material: %v; want the Secret's", err)
		}
		if cur.Status.Phase != kobev1.InstanceReady || !meta.IsStatusConditionTrue(cur.Status.Conditions, kobev1.ConditionReady) {
			t.Errorf("after the move: phase %s, conditions %v", cur.Status.Phase, cur.Status.Conditions)
		}
	})

	t.Run("a legacy member whose access Secret belongs to another object is recycled; the Secret is not moved nor deleted", func(t *testing.T) {
		ns := h.namespace(t)
		_, m := h.poolAndMember(t, ns, nil)
		got := h.waitPhase(t, m, kobev1.InstanceReady, 30*time.Second)
		a, err := accesstest.Sealer().Full(got)
		if err != nil {
			t.Fatal(err)
		}
		forged := memberaccess.LegacySecret(got, a)
		forged.OwnerReferences[0].UID = "someone-else"
		if err := h.c.Create(t.Context(), forged); err != nil {
			t.Fatal(err)
		}
		h.setStatus(t, m, func(cur *kobev1.ClusterInstance) {
			cur.Status.Access, cur.Status.AccessSecretRef = nil, &kobev1.LocalRef{Name: forged.Name}
		})
		var filled bool
		testenv.Eventually(t, 15*time.Second, m.Name+" recycled", func() error {
			cur, ok := h.get(t, m)
			filled = filled || (ok && cur.Status.Access != nil)
			return holds(!ok, "still there")
		})
		if filled {
			t.Error("status.access was filled from a Secret the member does not own")
		}
		h.waitEvent(t, ns, m.Name, kobev1.ReasonAccessUnreadable)
		if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(forged), &corev1.Secret{}); err != nil {
			t.Errorf("a Secret the member does not own was deleted with it: %v", err)
		}
	})
}
