package conditions

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Object is a kind whose status carries conditions (every kobe kind, see
// api/v1alpha1/status.go).
type Object interface {
	runtime.Object
	metav1.Object
	StatusConditions() *[]metav1.Condition
}

// Setter sets conditions during one reconcile: Now is the reconcile's time
// (from its injected clock) and Recorder, when not nil, receives the Events.
type Setter struct {
	Recorder events.EventRecorder
	Now      time.Time
}

// Set sets condition c on obj with observedGeneration = obj's generation.
// LastTransitionTime becomes Now when the status changes, and is kept
// otherwise. It reports whether the status or the reason changed (a new
// condition is a change).
func (s Setter) Set(obj Object, c metav1.Condition) (changed bool) {
	old := meta.FindStatusCondition(*obj.StatusConditions(), c.Type)
	changed = old == nil || old.Status != c.Status || old.Reason != c.Reason
	c.ObservedGeneration = obj.GetGeneration()
	c.LastTransitionTime = metav1.NewTime(s.Now)
	meta.SetStatusCondition(obj.StatusConditions(), c)
	return changed
}

// Mark sets condition c like Set and, when its reason changed (or it is
// new), records an Event of eventType (corev1.EventTypeNormal or Warning)
// whose reason is the condition's reason, whose action is the condition's
// type and whose note is its message. A change of status alone under the
// same reason tells nothing new and records none. It reports what Set does.
func (s Setter) Mark(obj Object, eventType string, c metav1.Condition) (changed bool) {
	old := meta.FindStatusCondition(*obj.StatusConditions(), c.Type)
	reasonChanged := old == nil || old.Reason != c.Reason
	changed = s.Set(obj, c)
	if reasonChanged {
		s.Event(obj, eventType, c.Reason, c.Type, c.Message)
	}
	return changed
}

// Event records an Event about obj, when a Recorder is set. Use it for
// actions that are not condition changes; reasons are API constants.
func (s Setter) Event(obj runtime.Object, eventType, reason, action, note string) {
	if s.Recorder != nil {
		s.Recorder.Eventf(obj, nil, eventType, reason, action, "%s", note)
	}
}
