//go:build heavy

package clusterpool

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

// TestBundleContentChangeRollsOut: a change to the content of a
// BootstrapConfig a pool names is a change of the pool's template: the
// revision goes up and the Ready member is replaced surge-style; a change
// to a bundle the pool does not name changes nothing.
func TestBundleContentChangeRollsOut(t *testing.T) {
	h, ns := startSimControllers(t)
	ctx, c := t.Context(), h.c
	bundle := func(name, content string) *kobev1.BootstrapConfig {
		bc := &kobev1.BootstrapConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: kobev1.BootstrapConfigSpec{Manifests: []kobev1.BootstrapManifest{{Name: "cm.yaml", Content: content}}}}
		if err := c.Create(ctx, bc); err != nil {
			t.Fatal(err)
		}
		return bc
	}
	used := bundle("used", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
	other := bundle("other", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
	p := h.createPool(t, ns, "bundled", func(p *kobev1.ClusterPool) {
		p.Spec.Size = ptr.To[int32](1)
		p.Spec.Backend = kobev1.BackendSpec{Type: kobev1.BackendSim, Sim: &kobev1.SimBackendSpec{ReadyAfter: &metav1.Duration{Duration: time.Second}}}
		p.Spec.Bootstraps = []kobev1.BootstrapRef{{Name: used.Name}}
	})
	got := h.waitPool(t, p, shortWait, "ready 1", readyIs(1))
	first, rev := got.Status.TemplateHash, got.Status.TemplateRevision
	old := h.members(t, p)
	if len(old) != 1 || old[0].Spec.TemplateHash != first {
		t.Fatalf("members %s, want one built from %s", summary(old), first)
	}

	change := func(bc *kobev1.BootstrapConfig, content string) {
		t.Helper()
		base := bc.DeepCopy()
		bc.Spec.Manifests[0].Content = content
		if err := c.Patch(ctx, bc, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}
	change(other, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b2}\n")
	// The pool would have seen it within this window.
	testenv.Consistently(t, 2*time.Second, "a bundle the pool does not name to leave its template alone", func() error {
		if got, _ := h.pool(t, p); got.Status.TemplateHash != first || got.Status.TemplateRevision != rev {
			return fmt.Errorf("a bundle the pool does not name changed its template: %s rev %d, was %s rev %d", got.Status.TemplateHash, got.Status.TemplateRevision, first, rev)
		}
		return nil
	})

	change(used, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a2}\n")
	watchMembers(t, h, p, shortWait, "the member built with the old bundle replaced", func(_ time.Time, ms []kobev1.ClusterInstance, st kobev1.ClusterPoolStatus) (bool, error) {
		ready := 0
		for _, m := range ms {
			if m.DeletionTimestamp == nil && m.Status.Phase == kobev1.InstanceReady {
				ready++
			}
		}
		if ready < 1 && st.TemplateRevision > rev {
			return false, fmt.Errorf("no Ready member during the rollout: %s", summary(ms))
		}
		return st.TemplateRevision == rev+1 && st.TemplateHash != first && !containsMember(ms, old[0].Name) && st.Ready == 1, nil
	})
	got, _ = h.pool(t, p)
	for _, m := range h.members(t, p) {
		if m.Spec.TemplateHash != got.Status.TemplateHash {
			t.Errorf("%s built from %s, the pool builds %s", m.Name, m.Spec.TemplateHash, got.Status.TemplateHash)
		}
	}
}
