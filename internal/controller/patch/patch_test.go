//go:build integration

package patch

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

const testFinalizer = "kobe.kunobi.ninja/patch-test"

// TestHelper runs the status and finalizer writes against a real API server,
// with a second writer where the fence matters.
func TestHelper(t *testing.T) {
	env := testenv.Start(t)
	c := env.Client
	ns := env.NewNamespace(t)
	create := func(t *testing.T) *kobev1.BootstrapConfig {
		t.Helper()
		b := &kobev1.BootstrapConfig{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "b-"},
			Spec:       kobev1.BootstrapConfigSpec{Manifests: []kobev1.BootstrapManifest{{Name: "a", Content: "kind: List"}}},
		}
		if err := c.Create(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	live := func(t *testing.T, b *kobev1.BootstrapConfig) *kobev1.BootstrapConfig {
		t.Helper()
		got := &kobev1.BootstrapConfig{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(b), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	cond := func(typ, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "m",
			LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}
	}

	t.Run("a changed status is written with observedGeneration", func(t *testing.T) {
		b := create(t)
		h := New(c, b)
		meta.SetStatusCondition(&b.Status.Conditions, cond("Ready", "Works"))
		if err := h.Status(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := live(t, b)
		if got.Status.ObservedGeneration != got.Generation || got.Generation == 0 {
			t.Errorf("observedGeneration = %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
		if !meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") {
			t.Errorf("conditions = %+v, want Ready True", got.Status.Conditions)
		}
		if h.Done() {
			t.Error("helper is done after a clean write")
		}
		// The answer is the new base: a second change is fenced by it, not refused.
		meta.SetStatusCondition(&b.Status.Conditions, cond("Other", "Works"))
		if err := h.Status(t.Context()); err != nil || h.Stale() {
			t.Fatalf("second write: err %v, stale %v", err, h.Stale())
		}
		if got := live(t, b); meta.FindStatusCondition(got.Status.Conditions, "Other") == nil {
			t.Errorf("second write lost: %+v", got.Status.Conditions)
		}
	})

	t.Run("nothing changed, nothing written", func(t *testing.T) {
		b := create(t)
		h := New(c, b)
		meta.SetStatusCondition(&b.Status.Conditions, cond("Ready", "Works"))
		if err := h.Status(t.Context()); err != nil {
			t.Fatal(err)
		}
		rv := live(t, b).ResourceVersion
		// The same condition again, and a Finish: no write at all.
		meta.SetStatusCondition(&b.Status.Conditions, cond("Ready", "Works"))
		res, err := h.Finish(t.Context(), ctrl.Result{RequeueAfter: time.Minute}, nil)
		if err != nil || res.RequeueAfter != time.Minute {
			t.Fatalf("Finish = %+v, %v", res, err)
		}
		if got := live(t, b).ResourceVersion; got != rv {
			t.Errorf("resourceVersion moved from %s to %s without a change", rv, got)
		}
	})

	t.Run("a concurrent status write makes the patch stale and survives", func(t *testing.T) {
		b := create(t)
		h := New(c, b)
		// Someone else (a gate publisher) sets a condition meanwhile.
		other := live(t, b)
		meta.SetStatusCondition(&other.Status.Conditions, cond("ExternalSignal", "SetByOthers"))
		if err := c.Status().Update(t.Context(), other); err != nil {
			t.Fatal(err)
		}
		// Our reconcile, decided from the older read, writes its own list.
		meta.SetStatusCondition(&b.Status.Conditions, cond("Ready", "Works"))
		res, err := h.Finish(t.Context(), ctrl.Result{RequeueAfter: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !h.Stale() || h.Gone() {
			t.Errorf("stale %v gone %v, want stale only", h.Stale(), h.Gone())
		}
		if res.RequeueAfter != StaleRequeue {
			t.Errorf("RequeueAfter = %s, want %s to decide again", res.RequeueAfter, StaleRequeue)
		}
		got := live(t, b)
		if meta.FindStatusCondition(got.Status.Conditions, "ExternalSignal") == nil {
			t.Errorf("the other writer's condition was overwritten: %+v", got.Status.Conditions)
		}
		if meta.FindStatusCondition(got.Status.Conditions, "Ready") != nil {
			t.Errorf("the stale write went through: %+v", got.Status.Conditions)
		}
		// Once stale, nothing more is written.
		rv := got.ResourceVersion
		meta.SetStatusCondition(&b.Status.Conditions, cond("Late", "Works"))
		if err := h.Status(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := live(t, b).ResourceVersion; got != rv {
			t.Error("a stale helper wrote again")
		}
	})

	t.Run("an object deleted meanwhile is gone, not an error", func(t *testing.T) {
		b := create(t)
		h := New(c, b)
		if err := c.Delete(t.Context(), live(t, b)); err != nil {
			t.Fatal(err)
		}
		meta.SetStatusCondition(&b.Status.Conditions, cond("Ready", "Works"))
		res, err := h.Finish(t.Context(), ctrl.Result{}, nil)
		if err != nil || !h.Gone() || h.Stale() || res.RequeueAfter != 0 {
			t.Errorf("Finish = %+v, %v; gone %v stale %v; want gone without requeue", res, err, h.Gone(), h.Stale())
		}
	})

	t.Run("a status the API server refuses is an error joined to the reconcile's", func(t *testing.T) {
		b := create(t)
		h := New(c, b)
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: "Ready", Status: "Maybe", Reason: "not a reason!",
			LastTransitionTime: metav1.Now()})
		first := errors.New("step failed")
		res, err := h.Finish(t.Context(), ctrl.Result{}, first)
		if !errors.Is(err, first) || !apierrors.IsInvalid(err) {
			t.Errorf("Finish error = %v, want the step's error and the API server's Invalid", err)
		}
		if res.RequeueAfter != 0 || h.Done() {
			t.Errorf("res %+v done %v", res, h.Done())
		}
	})

	t.Run("finalizers are fenced: added once, removal ends the helper", func(t *testing.T) {
		b := create(t)
		h := New(c, b)
		if err := h.AddFinalizer(t.Context(), testFinalizer); err != nil {
			t.Fatal(err)
		}
		if got := live(t, b); len(got.Finalizers) != 1 || got.Finalizers[0] != testFinalizer {
			t.Fatalf("finalizers = %v", got.Finalizers)
		}
		rv := live(t, b).ResourceVersion
		if err := h.AddFinalizer(t.Context(), testFinalizer); err != nil || live(t, b).ResourceVersion != rv {
			t.Errorf("adding a present finalizer wrote: %v", err)
		}
		// The status write after the finalizer patch is fenced by the new base.
		meta.SetStatusCondition(&b.Status.Conditions, cond("Ready", "Works"))
		if err := h.Status(t.Context()); err != nil || h.Stale() {
			t.Fatalf("status after finalizer: %v, stale %v", err, h.Stale())
		}

		if err := c.Delete(t.Context(), live(t, b)); err != nil {
			t.Fatal(err)
		}
		b = live(t, b) // a new reconcile sees the deletion
		h = New(c, b)
		meta.SetStatusCondition(&b.Status.Conditions, cond("Ready", "Destroyed"))
		if err := h.RemoveFinalizer(t.Context(), testFinalizer); err != nil {
			t.Fatal(err)
		}
		if !h.Gone() {
			t.Error("helper not gone after the last finalizer went")
		}
		testenv.Eventually(t, 10*time.Second, "the object to be deleted", func() error {
			err := c.Get(t.Context(), client.ObjectKeyFromObject(b), &kobev1.BootstrapConfig{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return errors.Join(errors.New("still there"), err)
		})
	})

	t.Run("a finalizer patch that meets a newer object is stale", func(t *testing.T) {
		b := create(t)
		h := New(c, b)
		other := live(t, b)
		other.Labels = map[string]string{"touched": "yes"}
		if err := c.Update(t.Context(), other); err != nil {
			t.Fatal(err)
		}
		if err := h.AddFinalizer(t.Context(), testFinalizer); err != nil {
			t.Fatal(err)
		}
		if !h.Stale() {
			t.Error("not stale after a conflicting finalizer patch")
		}
		if got := live(t, b); len(got.Finalizers) != 0 || got.Labels["touched"] != "yes" {
			t.Errorf("finalizers %v labels %v: the stale patch went through", got.Finalizers, got.Labels)
		}
	})
}
