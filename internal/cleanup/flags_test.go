package cleanup_test

import (
	"testing"
	"time"

	"github.com/kunobi-ninja/kobe/internal/cleanup"
	"github.com/kunobi-ninja/kobe/internal/testenv/flagtest"
)

func TestFlags(t *testing.T) {
	const refusal = "--cleanup-receipt-retention must be at least 720h (30 days): receipts must outlive the leases they prove"
	cases := []struct {
		name string
		args []string
		want time.Duration
		// refused is the refusal; empty: accepted.
		refused string
	}{
		{"default", nil, 720 * time.Hour, ""},
		{"longer", []string{"--cleanup-receipt-retention=2160h"}, 2160 * time.Hour, ""},
		{"shorter", []string{"--cleanup-receipt-retention=719h59m"}, 719*time.Hour + 59*time.Minute, refusal},
		{"zero", []string{"--cleanup-receipt-retention=0s"}, 0, refusal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := flagtest.Validate[cleanup.Flags](t, tc.args...)
			if f.ReceiptRetention != tc.want {
				t.Errorf("parsed %s, want %s", f.ReceiptRetention, tc.want)
			}
			flagtest.Refused(t, err, tc.refused)
		})
	}
}
