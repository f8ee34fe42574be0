// Package conditions is the one way kobe's reconcilers set a status
// condition: observedGeneration and the transition time from the
// reconcile's clock, a report of whether the status or reason changed, and
// an Event whose reason is the condition's reason when the reason changes.
// It decides no condition's value and writes nothing to the API server.
package conditions
