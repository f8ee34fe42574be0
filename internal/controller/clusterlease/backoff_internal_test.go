package clusterlease

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kunobi-ninja/kobe/internal/binding"
	"github.com/kunobi-ninja/kobe/internal/lease"
)

func TestDecideBindRetry(t *testing.T) {
	lost := fmt.Errorf("%w: the 2 members tried were taken meanwhile", binding.ErrNoReadyMember)
	uncertain := fmt.Errorf("binding lease l: %w: claiming member m: %w", binding.ErrUncertain, apierrors.NewServiceUnavailable("etcd is slow"))
	forbidden := fmt.Errorf("binding lease l: claiming member m: %w",
		apierrors.NewForbidden(schema.GroupResource{Resource: "clusterinstances"}, "m", errors.New("RBAC says no")))
	tests := []struct {
		name       string
		err        error
		failures   int
		wantReason string
		wantWait   time.Duration
		wantErr    bool
		wantTerm   bool
		wantLoud   bool
	}{
		{"first lost race: retried quickly and quietly", lost, 1, bindLostRace, 200 * time.Millisecond, false, false, false},
		{"a claim whose outcome is unknown: error with its reason", uncertain, 1, bindUncertain, 200 * time.Millisecond, true, false, false},
		{"second lost race waits twice as long", lost, 2, bindLostRace, 400 * time.Millisecond, false, false, false},
		{"third lost race in a row is logged", lost, 3, bindLostRace, 800 * time.Millisecond, false, false, true},
		{"a bind that keeps losing waits up to the cap", lost, 50, bindLostRace, 30 * time.Second, false, false, true},
		{"refused by the API server: error with its reason", forbidden, 1, bindRefused, 200 * time.Millisecond, true, false, false},
		{"refused again and again: the wait still grows", forbidden, 6, bindRefused, 6400 * time.Millisecond, true, false, false},
		{"unsupported cleanup mode: never retried", lease.ErrCleanupModeUnsupported, 1, bindUnsupported, 0, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideBindRetry(tt.err, tt.failures)
			if got.Reason != tt.wantReason || got.Wait != tt.wantWait || (got.Err != nil) != tt.wantErr || got.Loud != tt.wantLoud {
				t.Fatalf("decideBindRetry = %+v, want reason %s wait %s err %v loud %v", got, tt.wantReason, tt.wantWait, tt.wantErr, tt.wantLoud)
			}
			if got.Err == nil {
				return
			}
			if !errors.Is(got.Err, tt.err) {
				t.Errorf("returned error %v does not wrap the bind's error", got.Err)
			}
			if errors.Is(got.Err, reconcile.TerminalError(nil)) != tt.wantTerm {
				t.Errorf("terminal = %v, want %v", !tt.wantTerm, tt.wantTerm)
			}
		})
	}
}

// TestBindFailuresHoldRetries: a lease whose bind failed does not try again
// before its wait is over, however often it is woken; the count of failures
// in a row grows, restarts after a quiet spell, and goes when forgotten.
func TestBindFailuresHoldRetries(t *testing.T) {
	var f bindFailures
	k := types.NamespacedName{Namespace: "default", Name: "l"}
	other := types.NamespacedName{Namespace: "default", Name: "other"}
	t0 := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)

	if got := f.waitLeft(k, t0); got != 0 {
		t.Fatalf("waitLeft before any failure = %s, want 0", got)
	}
	steps := []struct {
		at        time.Duration // failure at t0+at
		wantCount int
	}{
		{0, 1},
		{200 * time.Millisecond, 2},
		{600 * time.Millisecond, 3},
		{600*time.Millisecond + bindFailuresForget + time.Nanosecond, 1}, // a quiet spell starts afresh
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		n := f.add(k, now)
		if n != s.wantCount {
			t.Fatalf("failure at +%s: count %d, want %d", s.at, n, s.wantCount)
		}
		d := decideBindRetry(binding.ErrNoReadyMember, n)
		f.hold(k, now, d.Wait)
		if got := f.waitLeft(k, now); got != d.Wait {
			t.Fatalf("waitLeft right after failure %d = %s, want %s", n, got, d.Wait)
		}
		if got := f.waitLeft(k, now.Add(d.Wait/2)); got != d.Wait-d.Wait/2 {
			t.Fatalf("waitLeft halfway = %s, want %s", got, d.Wait-d.Wait/2)
		}
		if got := f.waitLeft(k, now.Add(d.Wait)); got != 0 {
			t.Fatalf("waitLeft once the wait is over = %s, want 0", got)
		}
		if got := f.waitLeft(other, now); got != 0 {
			t.Fatalf("another lease is held back (%s)", got)
		}
	}
	f.forget(k)
	if got := f.add(k, t0.Add(time.Second)); got != 1 {
		t.Fatalf("count after forget = %d, want 1", got)
	}
}
