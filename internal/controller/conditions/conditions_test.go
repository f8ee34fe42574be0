//go:build integration

package conditions

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kobev1 "github.com/kunobi-ninja/kobe/api/v1alpha1"
	"github.com/kunobi-ninja/kobe/internal/testenv"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func ready(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: kobev1.ConditionReady, Status: status, Reason: reason, Message: msg}
}

// TestSet checks the fields Set fills in and what it reports, step by step
// on one object, as successive reconciles would.
func TestSet(t *testing.T) {
	obj := &kobev1.ClusterPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 3}}
	steps := []struct {
		name        string
		now         time.Time
		cond        metav1.Condition
		wantChanged bool
		wantLTT     time.Time
	}{
		{"a new condition is a change", t0, ready(metav1.ConditionFalse, "Filling", "0 of 2"), true, t0},
		{"same status and reason, new message: no change, time kept", t0.Add(time.Minute), ready(metav1.ConditionFalse, "Filling", "1 of 2"), false, t0},
		{"new reason, same status: a change, time kept", t0.Add(2 * time.Minute), ready(metav1.ConditionFalse, "BackendFailing", "boom"), true, t0},
		{"new status: a change at now", t0.Add(3 * time.Minute), ready(metav1.ConditionTrue, "Warm", "2 of 2"), true, t0.Add(3 * time.Minute)},
	}
	for _, st := range steps {
		if got := (Setter{Now: st.now}).Set(obj, st.cond); got != st.wantChanged {
			t.Errorf("%s: changed = %v, want %v", st.name, got, st.wantChanged)
		}
		c := meta.FindStatusCondition(obj.Status.Conditions, kobev1.ConditionReady)
		if c == nil || c.Status != st.cond.Status || c.Reason != st.cond.Reason || c.Message != st.cond.Message {
			t.Fatalf("%s: condition = %+v", st.name, c)
		}
		if c.ObservedGeneration != 3 {
			t.Errorf("%s: observedGeneration = %d, want 3", st.name, c.ObservedGeneration)
		}
		if !c.LastTransitionTime.Time.Equal(st.wantLTT) {
			t.Errorf("%s: lastTransitionTime = %s, want %s", st.name, c.LastTransitionTime.Time, st.wantLTT)
		}
	}
	if len(obj.Status.Conditions) != 1 {
		t.Errorf("conditions = %+v, want one", obj.Status.Conditions)
	}
}

// TestMarkEventsInOrder checks which marks record an Event, in order, with a
// recorder that keeps them in memory.
func TestMarkEventsInOrder(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	s := Setter{Recorder: rec, Now: t0}
	obj := &kobev1.ClusterInstance{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 1}}
	s.Mark(obj, corev1.EventTypeNormal, ready(metav1.ConditionFalse, "Creating", "building"))
	s.Mark(obj, corev1.EventTypeNormal, ready(metav1.ConditionFalse, "Creating", "still building"))
	s.Mark(obj, corev1.EventTypeWarning, ready(metav1.ConditionUnknown, "Creating", "lost track"))
	s.Mark(obj, corev1.EventTypeWarning, ready(metav1.ConditionFalse, "ProvisionFailed", "boom"))
	s.Set(obj, ready(metav1.ConditionFalse, "Unhealthy", "Set records nothing"))
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{"Normal Creating building", "Warning ProvisionFailed boom"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("events = %q, want %q", got, want)
	}
	(Setter{Now: t0}).Mark(obj, corev1.EventTypeNormal, ready(metav1.ConditionTrue, "Ready", "no recorder, no panic"))
}

// TestMarkEvents records through a real manager's event recorder and reads
// the Events back from the API server: one per reason change, none for a
// new message or a status change under the same reason.
func TestMarkEvents(t *testing.T) {
	env := testenv.Start(t)
	ns := env.NewNamespace(t)
	mgr := env.NewManager(t, ns)
	testenv.StartManager(t, mgr)
	s := Setter{Recorder: mgr.GetEventRecorder("kobe-conditions-test"), Now: t0}

	obj := &kobev1.BootstrapConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bundle"},
		Spec:       kobev1.BootstrapConfigSpec{Manifests: []kobev1.BootstrapManifest{{Name: "a", Content: "kind: List"}}},
	}
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	marks := []struct {
		cond        metav1.Condition
		wantChanged bool
	}{
		{ready(metav1.ConditionFalse, "Filling", "first"), true},           // new: Event Filling
		{ready(metav1.ConditionFalse, "Filling", "new message"), false},    // no Event
		{ready(metav1.ConditionUnknown, "Filling", "status only"), true},   // status changed, same reason: no Event
		{ready(metav1.ConditionTrue, "Warm", "warm now"), true},            // Event Warm
		{ready(metav1.ConditionTrue, "Warm", "still warm"), false},         // no Event
		{ready(metav1.ConditionFalse, "BackendFailing", "it broke"), true}, // Event BackendFailing
	}
	for i, m := range marks {
		if got := s.Mark(obj, corev1.EventTypeNormal, m.cond); got != m.wantChanged {
			t.Errorf("mark %d (%s/%s): changed = %v, want %v", i, m.cond.Status, m.cond.Reason, got, m.wantChanged)
		}
	}

	want := []string{"Filling/first", "Warm/warm now", "BackendFailing/it broke"}
	var got []string
	testenv.Eventually(t, 20*time.Second, "the Events of every reason change", func() error {
		var list eventsv1.EventList
		if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		got = got[:0]
		for _, e := range list.Items {
			if e.Regarding.Name != obj.Name || e.Regarding.Kind != "BootstrapConfig" {
				return fmt.Errorf("event %s regards %s %s", e.Name, e.Regarding.Kind, e.Regarding.Name)
			}
			if e.Action != kobev1.ConditionReady {
				return fmt.Errorf("event %s has action %q, want the condition type", e.Name, e.Action)
			}
			n := 1
			if e.Series != nil {
				n = int(e.Series.Count)
			}
			for range n {
				got = append(got, e.Reason+"/"+e.Note)
			}
		}
		if len(got) < len(want) {
			return fmt.Errorf("events so far: %v", got)
		}
		return nil
	})
	slices.Sort(got)
	sorted := slices.Clone(want)
	slices.Sort(sorted)
	if strings.Join(got, ",") != strings.Join(sorted, ",") {
		t.Errorf("events = %v, want exactly %v", got, want)
	}
}
