package pacing

import (
	"testing"
	"time"
)

func TestWrites(t *testing.T) {
	var w Writes[string]
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	if !w.At("a").IsZero() || w.Len() != 0 {
		t.Fatal("a new Writes remembers something")
	}
	w.Wrote("a", now)
	w.Wrote("b", now.Add(time.Second))
	if !w.At("a").Equal(now) || !w.At("b").Equal(now.Add(time.Second)) || w.Len() != 2 {
		t.Fatalf("At = %v, %v (len %d)", w.At("a"), w.At("b"), w.Len())
	}
	w.Forget("a")
	if !w.At("a").IsZero() || w.Len() != 1 {
		t.Fatalf("after Forget: At = %v, len %d", w.At("a"), w.Len())
	}
}
