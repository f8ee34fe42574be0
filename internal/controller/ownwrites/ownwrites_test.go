package ownwrites

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func object(rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", ResourceVersion: rv}}
}

func TestTracker(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "m"}
	other := types.NamespacedName{Namespace: "ns", Name: "other"}
	for _, tc := range []struct {
		name string
		// then runs after Wrote(key, "12") at t0; it returns the cached
		// resourceVersion Behind is asked about and how far the clock moved.
		then     func(tr *Tracker) (cachedRV string, advance time.Duration)
		wantWait bool
	}{
		{"the cache still holds the copy before the write", func(*Tracker) (string, time.Duration) { return "11", 0 }, true},
		{"the cache holds the write", func(*Tracker) (string, time.Duration) { return "12", 0 }, false},
		{"the write's event was delivered, a newer one is cached", func(tr *Tracker) (string, time.Duration) {
			p := tr.Predicate()
			p.Update(event.UpdateEvent{ObjectOld: object("11"), ObjectNew: object("12")})
			return "13", 0
		}, false},
		{"another object's event does not count", func(tr *Tracker) (string, time.Duration) {
			p := tr.Predicate()
			o := object("12")
			o.Name = other.Name
			p.Update(event.UpdateEvent{ObjectOld: object("11"), ObjectNew: o})
			return "11", 0
		}, true},
		{"an event of an older version does not count", func(tr *Tracker) (string, time.Duration) {
			tr.Predicate().Update(event.UpdateEvent{ObjectOld: object("10"), ObjectNew: object("11")})
			return "11", 0
		}, true},
		{"never longer than MaxWait (a relist may skip the version)", func(*Tracker) (string, time.Duration) { return "13", DefaultMaxWait }, false},
		{"the write's event came before the writer recorded it", func(tr *Tracker) (string, time.Duration) {
			tr.Forget(key)
			tr.Predicate().Update(event.UpdateEvent{ObjectOld: object("11"), ObjectNew: object("12")})
			tr.Wrote(key, "12")
			tr.Predicate().Update(event.UpdateEvent{ObjectOld: object("12"), ObjectNew: object("13")})
			return "13", 0
		}, false},
		{"the object was deleted", func(tr *Tracker) (string, time.Duration) {
			tr.Predicate().Delete(event.DeleteEvent{Object: object("12")})
			return "11", 0
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
			tr := New(clk, 0)
			tr.Wrote(key, "12")
			rv, advance := tc.then(tr)
			clk.SetTime(clk.Now().Add(advance))
			wait := tr.Behind(key, rv)
			if (wait > 0) != tc.wantWait || wait > DefaultMaxWait {
				t.Fatalf("Behind = %s, want a wait: %v", wait, tc.wantWait)
			}
			if tr.Behind(other, "1") != 0 {
				t.Error("an object never written waits")
			}
			if !tc.wantWait && tr.Behind(key, "11") != 0 {
				t.Error("a caught-up write is waited for again")
			}
		})
	}
}

func TestPredicateLetsEverythingThrough(t *testing.T) {
	p := New(clocktesting.NewFakePassiveClock(time.Now()), 0).Predicate()
	if !p.Create(event.CreateEvent{Object: object("1")}) || !p.Update(event.UpdateEvent{ObjectOld: object("1"), ObjectNew: object("2")}) ||
		!p.Delete(event.DeleteEvent{Object: object("2")}) || !p.Generic(event.GenericEvent{Object: object("2")}) {
		t.Fatal("the predicate filtered an event")
	}
}
