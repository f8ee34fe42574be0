package lease

import (
	"testing"
	"time"
)

func TestBindRetryAfter(t *testing.T) {
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{0, 200 * time.Millisecond}, // nonsense input treated as the first
		{1, 200 * time.Millisecond},
		{2, 400 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{6, 6400 * time.Millisecond},
		{8, 25600 * time.Millisecond},
		{9, 30 * time.Second},
		{100, 30 * time.Second},
		{1 << 30, 30 * time.Second}, // no overflow
	}
	for _, tt := range tests {
		if got := BindRetryAfter(tt.failures); got != tt.want {
			t.Errorf("BindRetryAfter(%d) = %s, want %s", tt.failures, got, tt.want)
		}
	}
	for n := 1; n < 40; n++ {
		if BindRetryAfter(n+1) < BindRetryAfter(n) {
			t.Fatalf("BindRetryAfter shrinks from %d to %d failures", n, n+1)
		}
	}
}
